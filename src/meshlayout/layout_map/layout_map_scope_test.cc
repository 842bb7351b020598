#include "meshlayout/layout_map/layout_map_scope.h"

#include <gtest/gtest.h>

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
