#include "meshlayout/plan/name_groups.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace meshlayout {
namespace {

TEST(NameGroups, RangesAndGroups) {
  EXPECT_EQ(format_ranges({5, 0, 1, 2, 7, 8, 2}), "0–2,5,7–8");
  EXPECT_EQ(format_ranges({0, 2, 4, 6, 8}, 3), "0,2,4,…");
  const std::vector<std::string_view> names = {"layer_0/q/kernel",
                                               "layer_1/q/kernel",
                                               "emb",
                                               "layer_2/q/kernel",
                                               "layer_5/q/kernel",
                                               "layer_0/mlp_1/kernel",
                                               "layer_1/mlp_1/kernel",
                                               "x_007",
                                               "x_008"};
  const std::vector<NameGroup> groups = group_names(names);
  ASSERT_EQ(groups.size(), 5u);
  EXPECT_EQ(groups[0].text, "layer_{0–2,5}/q/kernel");
  EXPECT_EQ(groups[0].count, 4u);
  EXPECT_EQ(groups[1].text, "emb");
  EXPECT_EQ(groups[2].text, "layer_{0–1}/mlp_1/kernel");  // the 1 that is the same stays
  EXPECT_EQ(groups[3].text, "x_007");                     // leading zeros: kept as text
  EXPECT_EQ(groups[4].text, "x_008");
}

TEST(NameGroups, SeveralNumbersAndOrder) {
  const std::vector<std::string_view> names = {"l_0/e_0/w", "l_0/e_1/w", "l_1/e_0/w",
                                               "l_1/e_1/w", "b",         "l_7/e_3/w"};
  const std::vector<NameGroup> groups = group_names(names);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].text, "l_{0–1,7}/e_{0–1,3}/w");  // in the order of first appearance
  EXPECT_EQ(groups[0].count, 5u);
  EXPECT_EQ(groups[1].text, "b");
  EXPECT_EQ(group_names({}).size(), 0u);
  EXPECT_EQ(format_ranges({}), "");
  EXPECT_EQ(format_ranges({3}), "3");
}

}  // namespace
}  // namespace meshlayout
