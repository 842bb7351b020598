#include "meshlayout/tokenizers/bpe_model.h"

#include <fmt/format.h>

#include <queue>
#include <tuple>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/unicode_text.h"

namespace meshlayout::tokenizers {

BpeModel::BpeModel(std::unordered_map<std::string, int64_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  for (const auto& [token, id] : vocab_) {
    if (id < 0 || id > INT32_MAX) {
      throw ValueError(fmt::format("BPE vocabulary: token {} has id {}; expected 0 to {}",
                                   quote(token), id, INT32_MAX));
    }
  }
  const auto id_of = [&](const std::string& token, size_t index, std::string_view role) {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      throw ValueError(
          fmt::format("BPE merge {} ({} {}) names {} {}, which is not in the vocabulary", index,
                      quote(merges[index].first), quote(merges[index].second), role, quote(token)));
    }
    return it->second;
  };
  merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const int64_t a = id_of(merges[i].first, i, "the token");
    const int64_t b = id_of(merges[i].second, i, "the token");
    const int64_t merged = id_of(merges[i].first + merges[i].second, i, "its result");
    merges_.try_emplace(key(a, b), Merge{static_cast<int64_t>(i), merged});  // first rank wins
  }
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    if (it == vocab_.end()) {
      throw ValueError(
          fmt::format("BPE unk_token {} is not in the vocabulary", quote(*options_.unk_token)));
    }
    unk_id_ = it->second;
  }
  if (options_.byte_fallback) {
    byte_ids_.resize(256);
    for (int b = 0; b < 256; ++b) {
      auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it != vocab_.end()) byte_ids_[b] = it->second;
    }
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(std::string(word)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The symbols, a doubly linked list over the characters' positions.
  struct Symbol {
    int64_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  bool last_was_unk = false;
  const auto push = [&](int64_t id) {
    const int n = static_cast<int>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  for (size_t pos = 0; pos < word.size();) {
    size_t len = utf8_sequence_length(word, pos);
    if (len == 0) len = 1;  // an invalid byte is a character of its own
    const std::string ch(word.substr(pos, len));
    pos += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      push(it->second);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b].has_value();
      if (all) {
        for (unsigned char b : ch) push(*byte_ids_[b]);
        last_was_unk = false;
        continue;
      }
    }
    if (!unk_id_) {
      throw ValueError(fmt::format(
          "BPE: no token for the character {} in {} and the model has no unk_token{}", quote(ch),
          quote(word), options_.byte_fallback ? " (nor all of its <0xXX> byte tokens)" : ""));
    }
    if (!(options_.fuse_unk && last_was_unk)) push(*unk_id_);
    last_was_unk = true;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // (rank, left position, new id), lowest rank first, then leftmost.
  using Candidate = std::tuple<int64_t, int, int64_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.emplace(it->second.rank, left, it->second.new_id);
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const auto [rank, left, new_id] = queue.top();
    queue.pop();
    Symbol& l = symbols[left];
    if (!l.alive || l.next < 0) continue;
    auto it = merges_.find(key(l.id, symbols[l.next].id));
    if (it == merges_.end() || it->second.rank != rank) continue;  // stale
    Symbol& r = symbols[l.next];
    r.alive = false;
    l.id = new_id;
    l.next = r.next;
    if (l.next >= 0) symbols[l.next].prev = left;
    consider(l.prev);
    consider(left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace meshlayout::tokenizers
