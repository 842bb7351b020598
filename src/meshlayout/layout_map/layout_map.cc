#include "meshlayout/layout_map/layout_map.h"

#include <fmt/format.h>
#include <re2/re2.h>
#include <re2/set.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/python_regex.h"

namespace meshlayout {

std::string_view match_mode_name(MatchMode mode) {
  switch (mode) {
    case MatchMode::kSearch:
      return "search";
    case MatchMode::kFullmatch:
      return "fullmatch";
    case MatchMode::kFirst:
      return "first";
  }
  return "search";
}

MatchMode parse_match_mode(std::string_view name) {
  if (name == "search") return MatchMode::kSearch;
  if (name == "fullmatch") return MatchMode::kFullmatch;
  if (name == "first") return MatchMode::kFirst;
  throw ValueError(fmt::format(
      "unknown match mode {}; expected 'search' (Keras 3.0–3.13), 'fullmatch' (Keras ≥ 3.14) "
      "or 'first' (Keras 2)",
      quote(name)));
}

// NOTE [One pass per lookup]: every rule is compiled into one unanchored RE2::Set, so a
// lookup runs one DFA pass over the path whatever the number of rules. The mode's anchoring is
// written into each pattern rather than given to the set, because RE2 compiles a leading `.*`
// of every rule into a loop of its own, and with thousands of `.*X` rules each DFA state then
// carries thousands of entries (a cold lookup at 10,000 fullmatch rules took ~2 ms):
//   fullmatch: `.*X` → `(?:X)\z`, else `\A(?:P)\z`      first: `.*X` → `(?:X)`, else `\A(?:P)`
// (`.*` is stripped only when X has no top-level `|`). Stripping `.*` is exact for paths
// without a newline; paths with one, and a set whose DFA runs out of memory (RE2 reports
// kOutOfMemory), are answered by each rule's own RE2, anchored by the mode — still linear.
namespace {

// True if `p` has a `|` outside every group and character class.
bool has_top_level_alternation(std::string_view p) {
  int depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      ++i;
      if (i < p.size() && p[i] == '^') ++i;
      if (i < p.size() && p[i] == ']') ++i;
      while (i < p.size() && p[i] != ']') i += p[i] == '\\' ? 2 : 1;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return true;
    }
  }
  return false;
}

std::string anchored_for_set(const std::string& p, MatchMode mode) {
  if (mode == MatchMode::kSearch) return p;
  std::string_view rest;
  bool strip = false;
  if (p.rfind(".*", 0) == 0) {
    rest = std::string_view(p).substr(p.size() > 2 && p[2] == '?' ? 3 : 2);
    strip = !has_top_level_alternation(rest) &&
            (rest.empty() || std::string_view("*+?{").find(rest[0]) == std::string_view::npos);
  }
  const std::string end = mode == MatchMode::kFullmatch ? "\\z" : "";
  // fmt, not `"(?:" + std::string(rest)`: see DimSharding::to_string on g++ 12's -Wrestrict.
  if (strip) return fmt::format("(?:{}){}", rest, end);
  return fmt::format("\\A(?:{}){}", p, end);
}

}  // namespace

struct LayoutMap::Matcher {
  MatchMode mode;
  std::unique_ptr<RE2::Set> set;
  std::vector<std::string> patterns;
  mutable std::once_flag fallback_once;
  mutable std::vector<std::unique_ptr<RE2>> fallback;

  static RE2::Options options() {
    RE2::Options o;
    o.set_log_errors(false);
    o.set_max_mem(int64_t{256} << 20);
    return o;
  }

  Matcher(MatchMode m, const std::vector<std::string>& re2_patterns)
      : mode(m), patterns(re2_patterns) {
    set = std::make_unique<RE2::Set>(options(), RE2::UNANCHORED);
    for (const std::string& p : patterns) {
      std::string error;
      if (set->Add(anchored_for_set(p, m), &error) < 0) {
        throw InternalError(
            fmt::format("RE2::Set refused checked pattern {}: {}", quote(p), error));
      }
    }
    if (!set->Compile()) {
      set.reset();  // out of memory while compiling: every lookup uses the fallback
    }
  }

  // Indices of every rule whose regex matches `path`, ascending.
  void hits(std::string_view path, std::vector<int>* out) const {
    out->clear();
    const bool exact_in_set =
        mode == MatchMode::kSearch || path.find('\n') == std::string_view::npos;
    if (set && exact_in_set) {
      RE2::Set::ErrorInfo info;
      bool matched = set->Match(re2::StringPiece(path.data(), path.size()), out, &info);
      if (matched || info.kind == RE2::Set::kNoError) {
        std::sort(out->begin(), out->end());
        return;
      }
      out->clear();
    }
    std::call_once(fallback_once, [this] {
      for (const std::string& p : patterns) fallback.push_back(std::make_unique<RE2>(p, options()));
    });
    re2::StringPiece text(path.data(), path.size());
    for (size_t i = 0; i < fallback.size(); ++i) {
      const RE2& re = *fallback[i];
      bool ok = mode == MatchMode::kSearch ? RE2::PartialMatch(text, re)
                : mode == MatchMode::kFullmatch
                    ? RE2::FullMatch(text, re)
                    : re.Match(text, 0, text.size(), RE2::ANCHOR_START, nullptr, 0);
      if (ok) out->push_back(static_cast<int>(i));
    }
  }
};

struct LayoutMap::MatcherCache {
  std::mutex mu;
  std::atomic<const Matcher*> ready{nullptr};
  std::unique_ptr<Matcher> owner;
};

LayoutMap::LayoutMap(std::optional<DeviceMesh> device_mesh, MatchMode mode)
    : mesh_(std::move(device_mesh)), mode_(mode), cache_(std::make_unique<MatcherCache>()) {}

LayoutMap::LayoutMap(const LayoutMap& other)
    : mesh_(other.mesh_),
      mode_(other.mode_),
      rules_(other.rules_),
      re2_patterns_(other.re2_patterns_),
      index_(other.index_),
      cache_(std::make_unique<MatcherCache>()) {}

LayoutMap& LayoutMap::operator=(const LayoutMap& other) {
  if (this != &other) {
    LayoutMap copy(other);
    *this = std::move(copy);
  }
  return *this;
}

LayoutMap::LayoutMap(LayoutMap&& other)
    : mesh_(std::move(other.mesh_)),
      mode_(other.mode_),
      rules_(std::move(other.rules_)),
      re2_patterns_(std::move(other.re2_patterns_)),
      index_(std::move(other.index_)),
      cache_(std::move(other.cache_)) {
  other.cache_ = std::make_unique<MatcherCache>();
  other.rules_.clear();
  other.re2_patterns_.clear();
  other.index_.clear();
}

LayoutMap& LayoutMap::operator=(LayoutMap&& other) {
  if (this != &other) {
    mesh_ = std::move(other.mesh_);
    mode_ = other.mode_;
    rules_ = std::move(other.rules_);
    re2_patterns_ = std::move(other.re2_patterns_);
    index_ = std::move(other.index_);
    std::swap(cache_, other.cache_);
    other.invalidate();
    other.rules_.clear();
    other.re2_patterns_.clear();
    other.index_.clear();
  }
  return *this;
}

LayoutMap::~LayoutMap() = default;

void LayoutMap::invalidate() {
  cache_->ready.store(nullptr, std::memory_order_release);
  cache_->owner.reset();
}

const LayoutMap::Matcher& LayoutMap::matcher() const {
  const Matcher* m = cache_->ready.load(std::memory_order_acquire);
  if (m) return *m;
  std::lock_guard<std::mutex> lock(cache_->mu);
  m = cache_->ready.load(std::memory_order_acquire);
  if (m) return *m;
  cache_->owner = std::make_unique<Matcher>(mode_, re2_patterns_);
  cache_->ready.store(cache_->owner.get(), std::memory_order_release);
  return *cache_->owner;
}

void LayoutMap::rebuild_index() {
  index_.clear();
  for (size_t i = 0; i < rules_.size(); ++i) index_.emplace(rules_[i].pattern, i);
}

void LayoutMap::set(std::string key, TensorLayout layout) {
  if (auto it = index_.find(key); it != index_.end()) {
    throw ValueError(
        fmt::format("{} already exists in the LayoutMap with value {}. Please make sure to not use "
                    "duplicated keys.",
                    quote(key), rules_[it->second].layout.to_string()));
  }
  std::string re2_pattern;
  try {
    re2_pattern = python_regex_to_re2(key);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("LayoutMap key {} is refused: {}", quote(key), e.what()));
  }
  if (!layout.device_mesh() && mesh_) {
    try {
      layout.set_device_mesh(*mesh_);
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("LayoutMap key {}: {}", quote(key), e.what()));
    }
  }
  index_.emplace(key, rules_.size());
  rules_.push_back(LayoutRule{std::move(key), std::move(layout)});
  re2_patterns_.push_back(std::move(re2_pattern));
  invalidate();
}

void LayoutMap::set(std::string key, std::initializer_list<DimSharding> axes) {
  set(std::move(key), TensorLayout(axes));
}

LayoutMap::Slot& LayoutMap::Slot::operator=(TensorLayout layout) {
  map_->set(key_, std::move(layout));
  return *this;
}

LayoutMap::Slot& LayoutMap::Slot::operator=(std::initializer_list<DimSharding> axes) {
  map_->set(key_, TensorLayout(axes));
  return *this;
}

namespace {

std::vector<int>& scratch_hits() {
  thread_local std::vector<int> hits;
  return hits;
}

}  // namespace

std::optional<size_t> LayoutMap::match_index(std::string_view path) const {
  if (auto it = index_.find(path); it != index_.end()) return it->second;
  if (rules_.empty()) return std::nullopt;
  std::vector<int>& hits = scratch_hits();
  matcher().hits(path, &hits);
  if (hits.empty()) return std::nullopt;
  if (hits.size() > 1 && mode_ != MatchMode::kFirst) {
    std::vector<std::string> keys;
    for (int h : hits) keys.push_back(rules_[static_cast<size_t>(h)].pattern);
    throw ValueError(
        fmt::format("Path {} matches multiple layout specification keys: {}. Please make sure each "
                    "tensor/variable path only matches at most one layout specification key in the "
                    "LayoutMap.",
                    quote(path), repr_list(keys)));
  }
  return static_cast<size_t>(hits.front());
}

std::optional<TensorLayout> LayoutMap::get(std::string_view path,
                                           const std::optional<TensorLayout>&) const {
  return get(path);
}

std::optional<TensorLayout> LayoutMap::get(std::string_view path) const {
  std::optional<size_t> index = match_index(path);
  if (!index) return std::nullopt;
  return rules_[*index].layout;
}

MatchExplanation LayoutMap::explain(std::string_view path) const {
  MatchExplanation e;
  e.path = std::string(path);
  e.mode = mode_;
  if (auto it = index_.find(path); it != index_.end()) e.exact_rule = it->second;
  if (!rules_.empty()) {
    std::vector<int> hits;
    matcher().hits(path, &hits);
    for (int h : hits) e.regex_hits.push_back(static_cast<size_t>(h));
  }
  using V = MatchExplanation::Verdict;
  if (e.exact_rule) {
    e.verdict = V::kExact;
    e.chosen_rule = e.exact_rule;
  } else if (e.regex_hits.empty()) {
    e.verdict = V::kNoMatch;
  } else if (e.regex_hits.size() == 1 || mode_ == MatchMode::kFirst) {
    e.verdict = V::kMatched;
    e.chosen_rule = e.regex_hits.front();
  } else {
    e.verdict = V::kAmbiguous;
  }
  return e;
}

std::string MatchExplanation::to_string(const LayoutMap& map) const {
  std::string out =
      fmt::format("path {} (mode {}, {} rules)\n", quote(path), match_mode_name(mode), map.size());
  if (exact_rule) {
    out += fmt::format("  rule {:>3}  {}  is the path itself (exact key)\n", *exact_rule,
                       quote(map.rule(*exact_rule).pattern));
  }
  for (size_t h : regex_hits) {
    out += fmt::format("  rule {:>3}  {}  matches as a regex -> {}\n", h,
                       quote(map.rule(h).pattern), map.rule(h).layout.to_string());
  }
  switch (verdict) {
    case Verdict::kExact:
      out += fmt::format("  verdict: rule {} (exact key wins over regexes) -> {}\n", *chosen_rule,
                         map.rule(*chosen_rule).layout.to_string());
      break;
    case Verdict::kMatched:
      out += fmt::format("  verdict: rule {}{} -> {}\n", *chosen_rule,
                         regex_hits.size() > 1 ? " (first in insertion order)" : "",
                         map.rule(*chosen_rule).layout.to_string());
      break;
    case Verdict::kAmbiguous:
      out += fmt::format(
          "  verdict: ambiguous: {} rules match; in mode {} a path may match one rule only\n",
          regex_hits.size(), match_mode_name(mode));
      break;
    case Verdict::kNoMatch:
      out += "  verdict: no rule matches; the tensor is replicated on the default mesh\n";
      break;
  }
  return out;
}

std::vector<size_t> LayoutMap::unused_rules(std::span<const std::string> paths) const {
  std::vector<bool> used(rules_.size(), false);
  if (!rules_.empty()) {
    const Matcher& m = matcher();
    std::vector<int> hits;
    for (const std::string& path : paths) {
      if (auto it = index_.find(path); it != index_.end()) used[it->second] = true;
      m.hits(path, &hits);
      for (int h : hits) used[static_cast<size_t>(h)] = true;
    }
  }
  std::vector<size_t> unused;
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) unused.push_back(i);
  }
  return unused;
}

bool LayoutMap::contains(std::string_view key) const { return index_.find(key) != index_.end(); }

std::vector<std::string> LayoutMap::keys() const {
  std::vector<std::string> out;
  out.reserve(rules_.size());
  for (const LayoutRule& r : rules_) out.push_back(r.pattern);
  return out;
}

TensorLayout LayoutMap::erase(std::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    throw NotFoundError(
        fmt::format("LayoutMap has no key {}; its keys are {}", quote(key), repr_list(keys())));
  }
  const size_t i = it->second;
  TensorLayout layout = std::move(rules_[i].layout);
  rules_.erase(rules_.begin() + static_cast<std::ptrdiff_t>(i));
  re2_patterns_.erase(re2_patterns_.begin() + static_cast<std::ptrdiff_t>(i));
  rebuild_index();
  invalidate();
  return layout;
}

TensorLayout LayoutMap::pop(std::string_view key) {
  if (!contains(key)) (void)get(key);  // Keras reads self[key] before deleting it
  return erase(key);
}

TensorLayout LayoutMap::pop(std::string_view key, const std::optional<TensorLayout>&) {
  return pop(key);
}

LayoutRule LayoutMap::popitem() {
  if (rules_.empty()) throw NotFoundError("popitem(): the LayoutMap is empty");
  LayoutRule last = rules_.back();
  erase(last.pattern);
  return last;
}

void LayoutMap::clear() {
  rules_.clear();
  re2_patterns_.clear();
  index_.clear();
  invalidate();
}

void LayoutMap::update(const LayoutMap& other) {
  for (const LayoutRule& r : other.rules_) set(r.pattern, r.layout);
}

void LayoutMap::update(std::initializer_list<std::pair<std::string, TensorLayout>> rules) {
  for (const auto& [key, layout] : rules) set(key, layout);
}

bool operator==(const LayoutMap& a, const LayoutMap& b) {
  return a.mesh_ == b.mesh_ && a.mode_ == b.mode_ && a.rules_ == b.rules_;
}

}  // namespace meshlayout
