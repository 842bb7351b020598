#include "meshlayout/tokenizers/hf_pretokenizers.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/hf_json.h"
#include "meshlayout/tokenizers/unicode_normalization.h"
#include "meshlayout/tokenizers/unicode_text.h"

namespace meshlayout::tokenizers {

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> alphabet = [] {
    std::array<std::string, 256> a;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      append_utf8(a[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return a;
  }();
  return alphabet;
}

std::optional<unsigned char> byte_level_byte(char32_t cp) {
  static const std::array<int, 324> inverse = [] {
    std::array<int, 324> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const std::string& s = byte_level_alphabet()[b];
      inv[decode_utf8(s, 0, s.size())] = b;
    }
    return inv;
  }();
  if (cp >= inverse.size() || inverse[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(inverse[cp]);
}

namespace {

// ---- normalizers ----

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string apply(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<HfRegex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string apply(std::string text) const override {
    return pattern_->replace_all(text, content_);
  }

 private:
  std::unique_ptr<HfRegex> pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string apply(std::string text) const override {
    for (const auto& step : steps_) text = step->apply(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// ---- pre-tokenizers ----

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits each piece at the matches of `regex` as Hugging Face's Split does.
void split_pieces(std::vector<Piece>& pieces, const HfRegex& regex, SplitBehavior behavior,
                  bool invert) {
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    struct Segment {
      size_t start, end;
      bool is_match;
    };
    std::vector<Segment> segments;
    size_t prev = 0;
    for (const auto& [start, end] : regex.find_all(piece.text)) {
      if (prev != start) segments.push_back({prev, start, invert});
      segments.push_back({start, end, !invert});
      prev = end;
    }
    if (prev != piece.text.size()) segments.push_back({prev, piece.text.size(), invert});
    std::vector<Segment> merged;
    bool previous_match = false;
    switch (behavior) {
      case SplitBehavior::kRemoved:
        for (const Segment& s : segments) {
          if (!s.is_match) merged.push_back(s);
        }
        break;
      case SplitBehavior::kIsolated:
        merged = segments;
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (const Segment& s : segments) {
          if (s.is_match && !previous_match && !merged.empty()) {
            merged.back().end = s.end;
          } else {
            merged.push_back(s);
          }
          previous_match = s.is_match;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
          if (it->is_match && !previous_match && !merged.empty()) {
            merged.back().start = it->start;
          } else {
            merged.push_back(*it);
          }
          previous_match = it->is_match;
        }
        std::reverse(merged.begin(), merged.end());
        break;
      case SplitBehavior::kContiguous:
        for (const Segment& s : segments) {
          if (s.is_match == previous_match && !merged.empty()) {
            merged.back().end = s.end;
          } else {
            merged.push_back(s);
          }
          previous_match = s.is_match;
        }
        break;
    }
    bool first = true;
    for (const Segment& s : merged) {
      if (s.end == s.start) continue;
      out.push_back({piece.text.substr(s.start, s.end - s.start), piece.at_start && first});
      first = false;
    }
  }
  pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<HfRegex> regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, *regex_, behavior_, invert_);
  }

 private:
  std::unique_ptr<HfRegex> regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<HfRegex>(kGpt2Pattern, "ByteLevel");
  }
  void apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (!p.text.starts_with(' ')) p.text.insert(0, 1, ' ');
      }
    }
    if (regex_) split_pieces(pieces, *regex_, SplitBehavior::kIsolated, false);
    const auto& alphabet = byte_level_alphabet();
    for (Piece& p : pieces) {
      std::string mapped;
      for (unsigned char b : p.text) mapped += alphabet[b];
      p.text = std::move(mapped);
    }
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<HfRegex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    if (split_) regex_ = std::make_unique<HfRegex>(replacement_, "Metaspace", /*literal=*/true);
  }
  void apply(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string replaced;
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced += c;
        }
      }
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start);
      if (prepend && !replaced.starts_with(replacement_)) replaced.insert(0, replacement_);
      p.text = std::move(replaced);
    }
    if (split_) split_pieces(pieces, *regex_, SplitBehavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  std::unique_ptr<HfRegex> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->apply(pieces);
  }
  bool byte_level() const override {
    for (const auto& step : steps_) {
      if (step->byte_level()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = hf_type(j, path);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(hf_string(j, "prepend", path));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(
        parse_pattern(hf_field(j, "pattern", path), hf_path(path, "pattern")),
        hf_string(j, "content", path));
  }
  if (auto unicode = make_unicode_normalizer(type)) return unicode;  // NFC, NFD, NFKC, NFKD
  if (type == "Sequence") {
    const std::string items = hf_path(path, "normalizers");
    std::vector<std::unique_ptr<Normalizer>> steps;
    const nlohmann::json& list = hf_list(j, "normalizers", path);
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto step = parse_normalizer(list[i], hf_path(items, i)))
        steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  hf_unsupported("normalizer", type, path, "NFC, NFD, NFKC, NFKD, Prepend, Replace and Sequence");
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& j,
                                                  const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = hf_type(j, path);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(hf_bool(j, "add_prefix_space", path, true),
                                                   hf_bool(j, "use_regex", path, true));
  }
  if (type == "Split") {
    const std::string behavior = hf_string(j, "behavior", path);
    SplitBehavior b;
    if (behavior == "Removed") {
      b = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      b = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      b = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      b = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      b = SplitBehavior::kContiguous;
    } else {
      throw ValueError(fmt::format(
          "tokenizer.json: {}.behavior is {}; expected Removed, Isolated, MergedWithPrevious, "
          "MergedWithNext or Contiguous",
          path, quote(behavior)));
    }
    return std::make_unique<SplitPreTokenizer>(
        parse_pattern(hf_field(j, "pattern", path), hf_path(path, "pattern")), b,
        hf_bool(j, "invert", path, false));
  }
  if (type == "Metaspace") {
    const std::string replacement = hf_string(j, "replacement", path);
    if (replacement.empty() || utf8_sequence_length(replacement, 0) != replacement.size()) {
      throw ValueError(fmt::format("tokenizer.json: {}.replacement is {}; expected one character",
                                   path, quote(replacement)));
    }
    PrependScheme scheme =
        hf_bool(j, "add_prefix_space", path, true) ? PrependScheme::kAlways : PrependScheme::kNever;
    if (j.contains("prepend_scheme")) {
      const std::string s = hf_string(j, "prepend_scheme", path);
      if (s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        throw ValueError(
            fmt::format("tokenizer.json: {}.prepend_scheme is {}; expected always, first or never",
                        path, quote(s)));
      }
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme,
                                                   hf_bool(j, "split", path, true));
  }
  if (type == "Sequence") {
    const std::string items = hf_path(path, "pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    const nlohmann::json& list = hf_list(j, "pretokenizers", path);
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto step = parse_pre_tokenizer(list[i], hf_path(items, i))) {
        steps.push_back(std::move(step));
      }
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  hf_unsupported("pre-tokenizer", type, path, "ByteLevel, Split, Metaspace and Sequence");
}

}  // namespace meshlayout::tokenizers
