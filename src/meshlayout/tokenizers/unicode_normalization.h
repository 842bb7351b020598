// unicode_normalization.h — Unicode normalisation forms NFC, NFD, NFKC and NFKD of UTF-8 text
// (canonical or compatibility decomposition, then canonical reordering and, for NFC/NFKC,
// canonical composition), on ICU (Debian's libicu-dev, `icu::Normalizer2`); and the Hugging
// Face tokenizer.json normalizers of those names ({"type": "NFC"}, as Qwen 2.5's).
//
// Invalid UTF-8: bytes that are not part of a valid character (possible only with byte-level
// tokenizers; Hugging Face takes only Unicode strings, so it never sees them) are kept
// unchanged, in place, and act as boundaries: each maximal valid run between them is normalised
// on its own — what normalising the text with each invalid byte as a lone surrogate gives
// (Python's surrogateescape + unicodedata.normalize), since a surrogate neither decomposes,
// reorders nor composes.
//
// Example:
//   unicode_normalize("e\xCC\x81", UnicodeForm::kNfc);      // "\xC3\xA9" (é)
//   unicode_normalize("\xE2\x84\xAB", UnicodeForm::kNfc);  // "\xC3\x85" (U+212B ANGSTROM SIGN → Å)
//   unicode_normalize("\xEF\xAC\x81", UnicodeForm::kNfkc); // "fi" (from the ligature ﬁ)
//   auto n = make_unicode_normalizer("NFC");               // a Normalizer, or nullptr
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "meshlayout/tokenizers/hf_pretokenizers.h"

namespace meshlayout::tokenizers {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

/// "NFC", "NFD", "NFKC" or "NFKD".
std::string_view unicode_form_name(UnicodeForm form);

/// The form of one of those names (Hugging Face's normalizer types), or nullopt.
std::optional<UnicodeForm> unicode_form_from_name(std::string_view name);

/// `text` in normalisation form `form`; invalid UTF-8 bytes are kept as they are (see above).
std::string unicode_normalize(std::string_view text, UnicodeForm form);

/// The Unicode version of the normalisation data (ICU's), e.g. "15.0".
std::string unicode_normalization_version();

/// The tokenizer.json normalizer of type `type` ("NFC", "NFD", "NFKC", "NFKD"), or nullptr for
/// any other type.
std::unique_ptr<Normalizer> make_unicode_normalizer(std::string_view type);

}  // namespace meshlayout::tokenizers
