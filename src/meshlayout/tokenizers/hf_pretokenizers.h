// hf_pretokenizers.h — the text stages of a Hugging Face tokenizer.json before the model:
// normalizers (NFC, NFD, NFKC, NFKD from unicode_normalization.h; Prepend, Replace, Sequence)
// and pre-tokenizers (ByteLevel, Split, Metaspace, Sequence) and the byte-level alphabet
// (GPT-2's bytes_to_unicode). The regexes of Split, Replace and ByteLevel run on RE2 as
// hf_regex.h describes.
//
// Example:
//   auto pre = parse_pre_tokenizer(j["pre_tokenizer"], "pre_tokenizer");
//   std::vector<Piece> pieces = {{"Hello  world", true}};
//   pre->apply(pieces);     // ByteLevel(use_regex): "Hello", "Ġ", "Ġworld"
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/tokenizers/hf_regex.h"

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

}  // namespace meshlayout::tokenizers
