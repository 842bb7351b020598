// layout_map.h — LayoutMap: ordered regex rules from variable paths to TensorLayouts, as
// keras.distribution.LayoutMap (Keras 3) and tf.keras.dtensor.experimental.LayoutMap (Keras 2).
//
// Lookup: an exact key wins; otherwise every key is a regex (Python syntax, run on RE2 in
// linear time) tested per the map's MatchMode:
//   kSearch    (default) match anywhere; several hits → ValueError  (Keras 3.0–3.13)
//   kFullmatch whole path;  several hits → ValueError                (Keras ≥ 3.14)
//   kFirst     match at the start; first rule in insertion order wins (Keras 2, seeds 000–002)
// No hit → std::nullopt (callers then use a replicated layout on the map's mesh).
// All rules sit in one RE2::Set, so a lookup is one pass over the path whatever the number
// of rules. Bad regexes are refused at insertion, not at first lookup.
//
// Thread safety, as for a standard container: any number of threads may call the const
// members (get, operator[] const, match_index, explain, unused_rules, keys, …) on one map at
// the same time. A mutation (set, Slot assignment, erase, pop, popitem, clear, update,
// assignment) must not overlap any other call on the same map: it is undefined behaviour
// (a lookup may read freed rules). Finish building the map, then share it for lookups; or
// give each writer its own copy (copies share nothing); or guard the map with a
// std::shared_mutex. scope() only stores a pointer to the map for the calling thread.
//
// Example (seed 003):
//   LayoutMap layout_map(mesh);
//   layout_map["dense.*kernel"] = {None, "model"};
//   layout_map["dense.*bias"] = {"model"};
//   std::optional<TensorLayout> l = layout_map["dense_1.kernel"];   // layout[None,model]@mesh
//   layout_map["my_model/conv3d_1/kernel"];                          // std::nullopt
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/tensor_layout.h"

namespace meshlayout {

enum class MatchMode { kSearch, kFullmatch, kFirst };

/// "search", "fullmatch" or "first".
std::string_view match_mode_name(MatchMode mode);
/// Parses a mode name; ValueError listing the three names otherwise.
MatchMode parse_match_mode(std::string_view name);

/// One key and its layout, in insertion order.
struct LayoutRule {
  std::string pattern;
  TensorLayout layout;
  friend bool operator==(const LayoutRule&, const LayoutRule&) = default;
};

/// Why a path gets the layout it gets: see LayoutMap::explain.
struct MatchExplanation {
  enum class Verdict { kExact, kMatched, kAmbiguous, kNoMatch };
  std::string path;
  MatchMode mode = MatchMode::kSearch;
  Verdict verdict = Verdict::kNoMatch;
  std::optional<size_t> exact_rule;   // a key equal to the path
  std::vector<size_t> regex_hits;     // every rule whose regex matches, insertion order
  std::optional<size_t> chosen_rule;  // the rule that decides (exact, single or first hit)
  /// Several lines of text; `map` supplies the patterns and layouts.
  std::string to_string(const class LayoutMap& map) const;
};

class LayoutMap {
 public:
  /// `device_mesh` (optional, as Keras 2) is given to rules whose layout has no mesh.
  explicit LayoutMap(std::optional<DeviceMesh> device_mesh = {},
                     MatchMode mode = MatchMode::kSearch);
  LayoutMap(const LayoutMap& other);
  LayoutMap& operator=(const LayoutMap& other);
  LayoutMap(LayoutMap&&);
  LayoutMap& operator=(LayoutMap&&);
  ~LayoutMap();

  /// The Keras 3 name and the Keras 2 name of the map's mesh.
  const std::optional<DeviceMesh>& device_mesh() const { return mesh_; }
  const std::optional<DeviceMesh>& get_default_mesh() const { return mesh_; }
  MatchMode mode() const { return mode_; }

  /// Inserts a rule (Keras __setitem__). ValueError for a duplicate key, a pattern that does
  /// not compile or uses Python-only syntax, or a layout whose axes the map's mesh lacks.
  /// A layout without a mesh gets the map's mesh; the map is unchanged on error.
  void set(std::string key, TensorLayout layout);
  /// The tuple shortcut: `set("dense.*kernel", {None, "model"})`.
  void set(std::string key, std::initializer_list<DimSharding> axes);

  /// The layout for `path` (Keras get / __getitem__): see the file comment. ValueError when
  /// several rules match in kSearch or kFullmatch mode, naming the path and every pattern.
  std::optional<TensorLayout> get(std::string_view path) const;
  /// Keras Mapping.get(key, default), exactly: a lookup never raises KeyError in Keras, so the
  /// default is never returned — this is get(path) (std::nullopt when nothing matches), kept so
  /// Keras code ports line for line. Write `get(path).value_or(d)` for a real default.
  std::optional<TensorLayout> get(std::string_view path,
                                  const std::optional<TensorLayout>& default_value) const;
  /// The index of the deciding rule for `path` (same rules as get()).
  std::optional<size_t> match_index(std::string_view path) const;

  /// `map[key] = layout` inserts; reading `map[key]` looks up.
  class Slot {
   public:
    Slot& operator=(TensorLayout layout);
    Slot& operator=(std::initializer_list<DimSharding> axes);
    operator std::optional<TensorLayout>() const { return map_->get(key_); }  // NOLINT
    std::optional<TensorLayout> get() const { return map_->get(key_); }

   private:
    friend class LayoutMap;
    Slot(LayoutMap* map, std::string key) : map_(map), key_(std::move(key)) {}
    LayoutMap* map_;
    std::string key_;
  };
  Slot operator[](std::string_view key) { return Slot(this, std::string(key)); }
  std::optional<TensorLayout> operator[](std::string_view path) const { return get(path); }

  /// Every rule that matches `path` and the verdict, without throwing on ambiguity.
  MatchExplanation explain(std::string_view path) const;
  /// Indices of rules that decide or match none of `paths` (the silent-typo detector).
  std::vector<size_t> unused_rules(std::span<const std::string> paths) const;

  // Mapping operations. Unlike Keras, contains() is true only for a stored key (Keras'
  // `key in map` is true for every string because lookups never raise KeyError).
  size_t size() const { return rules_.size(); }
  bool empty() const { return rules_.empty(); }
  bool contains(std::string_view key) const;
  const LayoutRule& rule(size_t index) const { return rules_.at(index); }
  const std::vector<LayoutRule>& rules() const { return rules_; }
  std::vector<std::string> keys() const;
  std::vector<LayoutRule>::const_iterator begin() const { return rules_.begin(); }
  std::vector<LayoutRule>::const_iterator end() const { return rules_.end(); }
  /// Removes a stored key and returns its layout; NotFoundError listing the keys otherwise.
  TensorLayout erase(std::string_view key);
  /// Keras pop(key[, default]), exactly as MutableMapping.pop over Keras' lookups: a stored key
  /// is removed and its layout returned. Any other key is first looked up (the multi-match
  /// ValueError can come from there), then NotFoundError (Keras: KeyError from __delitem__) —
  /// even with a default, which Keras never returns because its lookups never raise KeyError.
  TensorLayout pop(std::string_view key);
  TensorLayout pop(std::string_view key, const std::optional<TensorLayout>& default_value);
  /// Removes and returns the last inserted rule; NotFoundError if the map is empty.
  LayoutRule popitem();
  void clear();
  /// Inserts every rule of `other` (in order) or of `rules`, as set() does; on error the
  /// rules before the failing one stay inserted, as in Python.
  void update(const LayoutMap& other);
  void update(std::initializer_list<std::pair<std::string, TensorLayout>> rules);

  /// Same mesh, mode and rules in the same order.
  friend bool operator==(const LayoutMap& a, const LayoutMap& b);

  /// Makes this map current on this thread while the returned scope lives: variables created
  /// meanwhile are lazy and get their layouts from this map (layout_map_scope.h).
  class LayoutMapScope scope() const;

 private:
  struct Matcher;       // the RE2::Set over every rule, built on first lookup after a change
  struct MatcherCache;  // owns the Matcher and the lock that guards building it
  const Matcher& matcher() const;
  void invalidate();
  void rebuild_index();

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::optional<DeviceMesh> mesh_;
  MatchMode mode_;
  std::vector<LayoutRule> rules_;
  std::vector<std::string> re2_patterns_;  // rules_[i].pattern translated for RE2
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> index_;
  std::unique_ptr<MatcherCache> cache_;
};

}  // namespace meshlayout
