#include "meshlayout/tokenizers/unicode_normalization.h"

#include <fmt/format.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/utypes.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/tokenizers/unicode_text.h"

namespace meshlayout::tokenizers {
namespace {

const icu::Normalizer2& instance(UnicodeForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case UnicodeForm::kNfc:
      n = icu::Normalizer2::getNFCInstance(status);
      break;
    case UnicodeForm::kNfd:
      n = icu::Normalizer2::getNFDInstance(status);
      break;
    case UnicodeForm::kNfkc:
      n = icu::Normalizer2::getNFKCInstance(status);
      break;
    case UnicodeForm::kNfkd:
      n = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || n == nullptr) {
    throw InternalError(
        fmt::format("ICU has no {} normaliser: {}", unicode_form_name(form), u_errorName(status)));
  }
  return *n;
}

// Appends the normalised form of `run` (valid UTF-8) to `out`.
void normalize_run(const icu::Normalizer2& n, std::string_view run, std::string& out,
                   UnicodeForm form) {
  if (run.empty()) return;
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(run.data(), static_cast<int32_t>(run.size()));
  if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) {
    out.append(run);
    return;
  }
  status = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  n.normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) {
    throw InternalError(fmt::format("ICU could not {}-normalise {} bytes of text: {}",
                                    unicode_form_name(form), run.size(), u_errorName(status)));
  }
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  std::string apply(std::string text) const override { return unicode_normalize(text, form_); }

 private:
  UnicodeForm form_;
};

}  // namespace

std::string_view unicode_form_name(UnicodeForm form) {
  switch (form) {
    case UnicodeForm::kNfc:
      return "NFC";
    case UnicodeForm::kNfd:
      return "NFD";
    case UnicodeForm::kNfkc:
      return "NFKC";
    case UnicodeForm::kNfkd:
      return "NFKD";
  }
  return "?";
}

std::optional<UnicodeForm> unicode_form_from_name(std::string_view name) {
  for (UnicodeForm f :
       {UnicodeForm::kNfc, UnicodeForm::kNfd, UnicodeForm::kNfkc, UnicodeForm::kNfkd}) {
    if (unicode_form_name(f) == name) return f;
  }
  return std::nullopt;
}

std::string unicode_normalize(std::string_view text, UnicodeForm form) {
  const icu::Normalizer2& n = instance(form);
  std::string out;
  out.reserve(text.size());
  size_t run = 0;  // start of the valid run not yet normalised
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = utf8_sequence_length(text, pos);
    if (len != 0) {
      pos += len;
      continue;
    }
    normalize_run(n, text.substr(run, pos - run), out, form);
    out += text[pos];  // an invalid byte, kept
    run = ++pos;
  }
  normalize_run(n, text.substr(run), out, form);
  return out;
}

std::string unicode_normalization_version() {
  UVersionInfo v;
  u_getUnicodeVersion(v);
  return fmt::format("{}.{}", v[0], v[1]);
}

std::unique_ptr<Normalizer> make_unicode_normalizer(std::string_view type) {
  const std::optional<UnicodeForm> form = unicode_form_from_name(type);
  if (!form) return nullptr;
  return std::make_unique<UnicodeNormalizer>(*form);
}

}  // namespace meshlayout::tokenizers
