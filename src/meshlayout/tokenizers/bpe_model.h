// bpe_model.h — the BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE"}):
// a vocabulary, ranked merges, and what happens to a character the vocabulary lacks
// (byte fallback to `<0xXX>` tokens, else the unknown token, else an error).
//
// The merge order is Hugging Face's: repeatedly merge the adjacent pair of lowest rank, the
// leftmost one among equals. With ignore_merges a word that is itself in the vocabulary is
// one token.
//
// Example:
//   BpeModel bpe({{"a", 0}, {"b", 1}, {"ab", 2}}, {{"a", "b"}}, {});
//   std::vector<int64_t> ids;
//   bpe.tokenize("abab", ids);   // {2, 2}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace meshlayout::tokenizers {

struct BpeOptions {
  std::optional<std::string> unk_token;  // must be in the vocabulary when set
  bool fuse_unk = false;                 // consecutive unknown characters give one unk token
  bool byte_fallback = false;            // unknown characters become their <0xXX> byte tokens
  bool ignore_merges = false;            // a word found in the vocabulary is one token
};

class BpeModel {
 public:
  /// Throws ValueError for a merge naming a token the vocabulary lacks (naming the merge, its
  /// index and the token), a merge whose result is not in the vocabulary, an unk_token that
  /// is not in the vocabulary, or a negative id.
  BpeModel(std::unordered_map<std::string, int64_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  /// Appends the ids of `word` (UTF-8; split into characters, then merged) to `out`.
  /// Throws ValueError for a character with no token when there is neither byte fallback nor
  /// an unknown token.
  void tokenize(std::string_view word, std::vector<int64_t>& out) const;

  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    int64_t rank;
    int64_t new_id;
  };
  static uint64_t key(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
  }

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int64_t> unk_id_;
  std::vector<std::optional<int64_t>> byte_ids_;  // <0xXX> tokens, when byte_fallback
};

}  // namespace meshlayout::tokenizers
