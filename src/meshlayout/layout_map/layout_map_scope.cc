#include "meshlayout/layout_map/layout_map_scope.h"

namespace meshlayout {
namespace {
thread_local const LayoutMap* t_current = nullptr;
}  // namespace

LayoutMapScope::LayoutMapScope(const LayoutMap& map) : previous_(t_current) { t_current = &map; }

LayoutMapScope::LayoutMapScope(LayoutMapScope&& other) noexcept : previous_(other.previous_) {
  other.active_ = false;
}

LayoutMapScope::~LayoutMapScope() {
  if (active_) t_current = previous_;
}

const LayoutMap* current_layout_map() { return t_current; }

LayoutMapScope layout_map_scope(const LayoutMap& map) { return LayoutMapScope(map); }

LayoutMapScope LayoutMap::scope() const { return LayoutMapScope(*this); }

}  // namespace meshlayout
