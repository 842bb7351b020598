// layout_map_scope.h — LayoutMap::scope() and the deprecated layout_map_scope(map), as in
// Keras 2 (seeds 000–002): while a scope is alive on a thread, the variables created on that
// thread are lazily initialised and later materialised with the layouts of this map.
//
// The scope only records the map as the thread's current one; the variable and model code
// reads current_layout_map(), the map of the innermost scope still alive. Scopes nest, and a
// scope that ends out of order (A entered, then B, then A ended) removes only itself: B stays
// current, and no ended scope's map is ever current again.
//
// Example:
//   {
//     LayoutMapScope scope = layout_map.scope();
//     model = build_model();             // variables are lazy, keyed by their object paths
//   }
#pragma once

#include <cstdint>

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
  uint64_t id_;  // this scope's entry in the thread's stack of live scopes
  bool active_ = true;
};

/// The map of the innermost live scope on this thread, or nullptr.
const LayoutMap* current_layout_map();

/// Keras 2's deprecated spelling of `map.scope()`.
[[deprecated("use LayoutMap::scope() instead")]] LayoutMapScope layout_map_scope(
    const LayoutMap& map);

}  // namespace meshlayout
