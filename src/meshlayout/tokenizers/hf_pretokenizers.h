// hf_pretokenizers.h — the text stages of a Hugging Face tokenizer.json before the model:
// normalizers (NFC, NFD, NFKC, NFKD from unicode_normalization.h; Prepend, Replace, Sequence)
// and pre-tokenizers (ByteLevel, Split, Metaspace, Sequence), the byte-level alphabet (GPT-2's
// bytes_to_unicode) and the regexes of Split and ByteLevel run on RE2.
//
// Regexes: `\s` and `\S` mean Unicode White_Space (as in Oniguruma, which the reference
// library uses), `\p{L}`/`\p{N}` are Unicode classes. RE2 has no look-around, so the one
// look-ahead these files use — the ending `\s+(?!\S)|\s+` of the GPT-2, Llama 3 and Qwen 2
// patterns — is implemented by hand: a whitespace run followed by a non-space gives back its
// last character. Any other look-around is refused with the pattern named. Bytes that are not
// valid UTF-8 (possible only with byte-level BPE) match as characters that are neither
// letters, digits nor whitespace, one per byte.
//
// Example:
//   auto pre = parse_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer");
//   std::vector<Piece> pieces = {{"Hello  world", true}};
//   pre->apply(pieces);     // ByteLevel(use_regex): "Hello", "Ġ", "Ġworld"
#pragma once

#include <re2/re2.h>

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshlayout::tokenizers {

/// A piece of text on its way to the model; `at_start` when it begins the original text
/// (Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  bool at_start = false;
};

/// GPT-2's byte-to-character map: the UTF-8 text of the character standing for each byte.
const std::array<std::string, 256>& byte_level_alphabet();

/// The byte a byte-level character stands for, or nullopt for other characters.
std::optional<unsigned char> byte_level_byte(char32_t cp);

/// The pattern of GPT-2's ByteLevel pre-tokenizer (use_regex: true).
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

/// A Hugging Face regex on RE2 (see the file comment), or with `literal` a plain string.
/// ValueError naming `path`, the pattern and RE2's reason when it cannot be compiled.
class HfRegex {
 public:
  HfRegex(std::string_view pattern, std::string_view path, bool literal = false);
  /// Every non-overlapping match, left to right, as [start, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& re2_pattern() const { return re_->pattern(); }

 private:
  std::unique_ptr<RE2> re_;
  int lookahead_group_ = 0;  // the `\s+(?!\S)` alternative's group; 0 when absent
};

/// The pattern with `\s`/`\S` spelled as Unicode White_Space classes for RE2.
std::string translate_hf_regex(std::string_view pattern, std::string_view path);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string apply(std::string text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
  /// True when the pieces come out in the byte-level alphabet (any input bytes are fine).
  virtual bool byte_level() const { return false; }
};

/// From the JSON at `path` (null gives nullptr). ValueError naming an unsupported type (e.g.
/// Lowercase, BertNormalizer) or a malformed field with its path.
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const std::string& path);
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j, const std::string& path);

/// The `pattern` object of Split and Replace: {"String": s} or {"Regex": r}.
std::unique_ptr<HfRegex> parse_pattern(const nlohmann::json& j, const std::string& path);

}  // namespace meshlayout::tokenizers
