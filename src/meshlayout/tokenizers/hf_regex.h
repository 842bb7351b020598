// hf_regex.h — the regexes of a Hugging Face tokenizer.json (Split and ByteLevel
// pre-tokenizers, Replace normalizers and decoders) run on RE2.
//
// `\s` and `\S` mean Unicode White_Space (as in Oniguruma, which the reference library uses),
// `\p{L}`/`\p{N}` are Unicode classes. RE2 has no look-around, so the one look-ahead these
// files use — the ending `\s+(?!\S)|\s+` of the GPT-2, Llama 3 and Qwen 2 patterns — is
// implemented by hand: a whitespace run followed by a non-space gives back its last character.
// Any other look-around is refused with the pattern named. Bytes that are not valid UTF-8
// (possible only with byte-level BPE) match as characters that are neither letters, digits nor
// whitespace, one per byte.
//
// Example:
//   HfRegex re(R"(\s+(?!\S)|\s+)", "pre_tokenizer.pattern.Regex");
//   re.find_all("a  b");    // {1, 2}, {2, 3}: the run gives its last space to "b"
//   parse_pattern(json{{"String", " "}}, "normalizer.pattern");   // a literal " "
#pragma once

#include <re2/re2.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshlayout::tokenizers {

/// A Hugging Face regex on RE2 (see the file comment), or with `literal` a plain string.
/// ValueError naming `path`, the pattern and RE2's reason when it cannot be compiled.
class HfRegex {
 public:
  HfRegex(std::string_view pattern, std::string_view path, bool literal = false);
  /// Every non-overlapping match, left to right, as [start, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  /// `text` with every match of find_all replaced by `content` (Replace's normalizer and
  /// decoder).
  std::string replace_all(std::string_view text, std::string_view content) const;
  const std::string& re2_pattern() const { return re_->pattern(); }

 private:
  std::unique_ptr<RE2> re_;
  int lookahead_group_ = 0;  // the `\s+(?!\S)` alternative's group; 0 when absent
};

/// The pattern with `\s`/`\S` spelled as Unicode White_Space classes for RE2.
std::string translate_hf_regex(std::string_view pattern, std::string_view path);

/// The `pattern` object of Split and Replace: {"String": s} or {"Regex": r}.
std::unique_ptr<HfRegex> parse_pattern(const nlohmann::json& j, const std::string& path);

}  // namespace meshlayout::tokenizers
