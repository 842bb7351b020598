#include "meshlayout/layout_map/layout_map_scope.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

namespace meshlayout {
namespace {

TEST(LayoutMapScopeTest, ScopesNestAndRestoreThePreviousMap) {
  LayoutMap outer, inner;
  EXPECT_EQ(current_layout_map(), nullptr);
  {
    LayoutMapScope a = outer.scope();
    EXPECT_EQ(current_layout_map(), &outer);
    {
      LayoutMapScope b = inner.scope();
      EXPECT_EQ(current_layout_map(), &inner);
    }
    EXPECT_EQ(current_layout_map(), &outer);
  }
  EXPECT_EQ(current_layout_map(), nullptr);
}

// Scopes that end out of order (possible with optional, unique_ptr or Python's with-blocks in
// generators) remove only themselves: an ended scope's map is never current again.
TEST(LayoutMapScopeTest, ScopesEndedOutOfOrderLeaveTheInnermostLiveOne) {
  LayoutMap a_map, b_map, c_map;
  auto a = std::make_optional<LayoutMapScope>(a_map.scope());
  auto b = std::make_optional<LayoutMapScope>(b_map.scope());
  auto c = std::make_optional<LayoutMapScope>(c_map.scope());
  b.reset();  // the middle one first
  EXPECT_EQ(current_layout_map(), &c_map);
  a.reset();
  EXPECT_EQ(current_layout_map(), &c_map);
  c.reset();
  EXPECT_EQ(current_layout_map(), nullptr);  // not a_map or b_map, which ended
  // A moved scope ends once, when its last owner does.
  auto d = std::make_optional<LayoutMapScope>(a_map.scope());
  LayoutMapScope moved(std::move(*d));
  d.reset();
  EXPECT_EQ(current_layout_map(), &a_map);
}

TEST(LayoutMapScopeTest, IsPerThreadAsInKeras) {
  LayoutMap map;
  LayoutMapScope scope = map.scope();
  const LayoutMap* seen = &map;
  std::thread([&] { seen = current_layout_map(); }).join();
  EXPECT_EQ(seen, nullptr);
}

TEST(LayoutMapScopeTest, DeprecatedSpellingWorks) {
  LayoutMap map;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  LayoutMapScope scope = layout_map_scope(map);
#pragma GCC diagnostic pop
  EXPECT_EQ(current_layout_map(), &map);
}

}  // namespace
}  // namespace meshlayout
