// layout_map_scope.h — LayoutMap::scope() and the deprecated layout_map_scope(map), as in
// Keras 2 (seeds 000–002): while a scope is alive on a thread, the variables created on that
// thread are lazily initialised and later materialised with the layouts of this map.
//
// The scope only records the map as the thread's current one (restoring the previous map when
// it ends, so scopes nest); the variable and model code reads current_layout_map().
//
// Example:
//   {
//     LayoutMapScope scope = layout_map.scope();
//     model = build_model();             // variables are lazy, keyed by their object paths
//   }
#pragma once

#include "meshlayout/layout_map/layout_map.h"

namespace meshlayout {

/// RAII: makes a LayoutMap the current one of this thread for its lifetime. Move-only.
class [[nodiscard]] LayoutMapScope {
 public:
  explicit LayoutMapScope(const LayoutMap& map);
  LayoutMapScope(LayoutMapScope&& other) noexcept;
  LayoutMapScope& operator=(LayoutMapScope&&) = delete;
  LayoutMapScope(const LayoutMapScope&) = delete;
  LayoutMapScope& operator=(const LayoutMapScope&) = delete;
  ~LayoutMapScope();

 private:
  const LayoutMap* previous_;
  bool active_ = true;
};

/// The map of the innermost live scope on this thread, or nullptr.
const LayoutMap* current_layout_map();

/// Keras 2's deprecated spelling of `map.scope()`.
[[deprecated("use LayoutMap::scope() instead")]] LayoutMapScope layout_map_scope(
    const LayoutMap& map);

}  // namespace meshlayout
