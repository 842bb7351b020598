#include "meshlayout/layout_map/layout_map_scope.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace meshlayout {
namespace {
// The live scopes of this thread, innermost last: (scope id, map).
thread_local std::vector<std::pair<uint64_t, const LayoutMap*>> t_scopes;
thread_local uint64_t t_next_id = 0;
}  // namespace

LayoutMapScope::LayoutMapScope(const LayoutMap& map) : id_(t_next_id++) {
  t_scopes.emplace_back(id_, &map);
}

LayoutMapScope::LayoutMapScope(LayoutMapScope&& other) noexcept : id_(other.id_) {
  other.active_ = false;
}

LayoutMapScope::~LayoutMapScope() {
  if (!active_) return;
  const auto it = std::find_if(t_scopes.rbegin(), t_scopes.rend(),
                               [&](const auto& e) { return e.first == id_; });
  if (it != t_scopes.rend()) t_scopes.erase(std::next(it).base());
}

const LayoutMap* current_layout_map() {
  return t_scopes.empty() ? nullptr : t_scopes.back().second;
}

LayoutMapScope layout_map_scope(const LayoutMap& map) { return LayoutMapScope(map); }

LayoutMapScope LayoutMap::scope() const { return LayoutMapScope(*this); }

}  // namespace meshlayout
