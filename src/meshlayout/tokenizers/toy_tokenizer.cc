#include "meshlayout/tokenizers/toy_tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/tokenizers/hf_pretokenizers.h"

namespace meshlayout::tokenizers {
namespace {

constexpr int64_t kMinVocab = 36, kMaxVocab = 4096;

}  // namespace

std::string toy_tokenizer_json(int64_t vocab_size) {
  if (vocab_size < kMinVocab || vocab_size > kMaxVocab) {
    throw ValueError(fmt::format("toy tokenizer: vocab_size must be from {} to {}, got {}",
                                 kMinVocab, kMaxVocab, vocab_size));
  }
  const std::array<std::string, 256>& alphabet = byte_level_alphabet();
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  if (vocab_size >= 3 + 256) {
    tokens.insert(tokens.end(), alphabet.begin(), alphabet.end());
  } else {
    for (const char c : std::string("abcdefghijklmnopqrstuvwxyz \n.,!?'")) {
      tokens.push_back(alphabet[static_cast<unsigned char>(c)]);
    }
  }
  std::set<std::string> known(tokens.begin(), tokens.end());
  nlohmann::json merges = nlohmann::json::array();
  const auto merge = [&](const std::string& a, const std::string& b) {
    if (static_cast<int64_t>(tokens.size()) >= vocab_size) return;
    if (!known.count(a) || !known.count(b) || known.count(a + b)) return;
    merges.push_back(a + " " + b);
    tokens.push_back(a + b);
    known.insert(a + b);
  };
  const std::string space = alphabet[' '];
  const char* common[][2] = {
      {"Ġ", "t"}, {"Ġt", "h"}, {"Ġth", "e"}, {"h", "e"}, {"i", "n"}, {"e", "r"}, {"a", "n"},
      {"o", "n"}, {"r", "e"},  {"a", "t"},   {"e", "n"}, {"Ġ", "a"}, {"Ġ", "s"}, {"Ġ", "w"},
      {"o", "r"}, {"e", "s"},  {"Ġ", "o"},   {"l", "l"}, {"e", "d"}, {"Ġ", "i"}, {"i", "s"},
      {"i", "t"}, {"a", "r"},  {"Ġ", "b"},   {"Ġ", "m"}, {"o", "u"}, {"Ġ", "c"}, {"in", "g"}};
  for (const auto& [a, b] : common) merge(a, b);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  for (const char c : letters) merge(space, std::string(1, c));
  for (const char a : letters) {
    for (const char b : letters) merge(std::string(1, a), std::string(1, b));
  }
  if (static_cast<int64_t>(tokens.size()) != vocab_size) {
    throw ValueError(fmt::format("toy tokenizer: vocab_size {} is more than its {} tokens",
                                 vocab_size, tokens.size()));
  }
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json added = nlohmann::json::array();
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i},
                     {"content", tokens[static_cast<size_t>(i)]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  const nlohmann::json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  return j.dump(1);
}

std::string toy_chat_tokenizer_json(int64_t vocab_size) {
  constexpr int64_t n = std::size(kToyChatTokens);
  nlohmann::json j = nlohmann::json::parse(toy_tokenizer_json(vocab_size - n));
  for (int64_t i = 0; i < n; ++i) {
    j["added_tokens"].push_back({{"id", vocab_size - n + i},
                                 {"content", kToyChatTokens[i]},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  }
  return j.dump(1);
}

void write_toy_tokenizer(const std::string& dir, int64_t vocab_size, bool chat) {
  const std::string text =
      chat ? toy_chat_tokenizer_json(vocab_size) : toy_tokenizer_json(vocab_size);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    throw ResourceExhaustedError(fmt::format("toy tokenizer: cannot write '{}'", path));
  }
}

}  // namespace meshlayout::tokenizers
