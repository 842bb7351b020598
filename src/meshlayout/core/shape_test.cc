#include <gtest/gtest.h>

#include <limits>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"

namespace meshlayout {
namespace {

TEST(ShapeTest, TextFormAndParsing) {
  EXPECT_EQ(shape_to_string({8, 6}), "(8, 6)");
  EXPECT_EQ(shape_to_string({5}), "(5,)");
  EXPECT_EQ(shape_to_string({}), "()");
  EXPECT_EQ(parse_shape("8,6"), (Shape{8, 6}));
  EXPECT_EQ(parse_shape("(5,)"), (Shape{5}));
  EXPECT_EQ(parse_shape(""), Shape{});
  EXPECT_EQ(num_elements({2, 3, 4}), 24);
  EXPECT_EQ(num_elements({}), 1);
}

TEST(ShapeTest, ParseRejectsNegativeExtent) {
  try {
    parse_shape("8,-1");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "shape '8,-1' dimension 1 is -1; extents must be >= 0");
  }
}

TEST(ShapeTest, CheckedArithmeticRefusesOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(checked_add(2, 3), 5);
  EXPECT_EQ(checked_add(kMax - 1, 1), kMax);
  EXPECT_EQ(checked_add(kMax, 1), std::nullopt);
  EXPECT_EQ(checked_add(3, kMax), std::nullopt);
  EXPECT_EQ(checked_add(-kMax, -2), std::nullopt);
  EXPECT_EQ(checked_mul(kMax / 2, 2), kMax - 1);
  EXPECT_EQ(checked_mul(kMax / 2 + 1, 2), std::nullopt);
}

}  // namespace
}  // namespace meshlayout
