// shard_geometry_limits_test.cc — sizes at the edge of int64: every box of a shape whose
// elements fit is exact (no overflow in the ceil-division or the counts), and a shape whose
// elements do not fit is refused, naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

class ShardGeometryLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_{{2, 4}, {"data", "model"}};
};

TEST(CheckedSizes, NumElementsRefusesOverflowAndShortCutsZero) {
  EXPECT_EQ(num_elements({}), 1);
  EXPECT_EQ(num_elements({kMax}), kMax);
  EXPECT_EQ(num_elements({int64_t{1} << 32, int64_t{1} << 32, 0}),
            0);  // 0 elements, whatever the rest
  try {
    num_elements({int64_t{1} << 32, int64_t{1} << 32, 16});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("shape (4294967296, 4294967296, 16) has more elements than "
                                    "fit in a signed 64-bit count"));
  }
  EXPECT_EQ(num_bytes({1 << 10}, DType::kF64), 8192);
  EXPECT_THROW(num_bytes({kMax / 4}, DType::kF64), ValueError);
  EXPECT_EQ(ceil_div(kMax, 2), int64_t{1} << 62);
  EXPECT_EQ(ceil_div(kMax, kMax), 1);
  EXPECT_EQ(ceil_div(0, 7), 0);
}

TEST(CheckedSizes, BlockRangesOfTheLargestExtentAreExact) {
  // (n + k - 1) / k overflowed here and gave negative boxes.
  EXPECT_EQ(block_range(kMax, 2, 0), std::make_pair(int64_t{0}, int64_t{1} << 62));
  EXPECT_EQ(block_range(kMax, 2, 1), std::make_pair(int64_t{1} << 62, kMax));
  EXPECT_EQ(block_range(kMax, 3, 2).second, kMax);
  for (int64_t k : {1, 2, 3, 7, 8, 1000}) {
    int64_t covered = 0;
    for (int64_t i = 0; i < k; ++i) {
      auto [start, end] = block_range(kMax, k, i);
      EXPECT_EQ(start, covered);
      EXPECT_LE(start, end);
      covered = end;
    }
    EXPECT_EQ(covered, kMax) << k;
  }
}

TEST_F(ShardGeometryLimitsTest, HugeExtentWithAFittingElementCountTilesExactly) {
  ShardGeometry g(TensorLayout({"data", None}, mesh_), {kMax, 1});
  EXPECT_EQ(g.box(0).to_string(), "[0:4611686018427387904, 0:1]");
  EXPECT_EQ(g.box(7).to_string(), "[4611686018427387904:9223372036854775807, 0:1]");
  EXPECT_EQ(g.max_box_elements(), int64_t{1} << 62);
}

TEST_F(ShardGeometryLimitsTest, ZeroSizedTensorWithAHugeExtentHasNoNegativeBox) {
  // A checkpoint header may legally hold shape [0, 2^63-1] (0 bytes).
  ShardGeometry g(TensorLayout({None, "model"}, mesh_), {0, kMax});
  for (int64_t p = 0; p < mesh_.size(); ++p) {
    const Box b = g.box(p);
    EXPECT_EQ(b.num_elements(), 0);
    EXPECT_GE(b.shape[1], 0);
    EXPECT_GE(b.offset[1], 0);
  }
  EXPECT_EQ(g.max_box_elements(), 0);
}

TEST_F(ShardGeometryLimitsTest, ShapesWhoseElementsDoNotFitAreRefused) {
  try {
    ShardGeometry g(TensorLayout({"data", None}, mesh_), {kMax, 2}, {}, "variable 'w'");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("variable 'w': shape (9223372036854775807, 2) has more elements"));
  }
  EXPECT_THROW(ShardGeometry(TensorLayout({None, None, "model"}, mesh_),
                             {int64_t{1} << 32, int64_t{1} << 32, 16}),
               ValueError);
}

TEST(DeviceCountLimits, VariablesAndOverridesAreBounded) {
  EXPECT_EQ(parse_device_count_variable("MESHLAYOUT_CPU_DEVICES", "8"), 8);
  EXPECT_EQ(parse_device_count_variable("MESHLAYOUT_CPU_DEVICES", "1048576"), kMaxDeviceCount);
  for (const char* bad :
       {"99999999999", "1048577", "0", "-3", "8x", "", "99999999999999999999999"}) {
    try {
      parse_device_count_variable("MESHLAYOUT_LOCAL_DEVICES", bad);
      FAIL() << bad;
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("MESHLAYOUT_LOCAL_DEVICES="));
      EXPECT_THAT(e.what(), HasSubstr("must be a whole number of devices from 1 to 1048576"));
    }
  }
  EXPECT_THROW(set_device_count(kMaxDeviceCount + 1), ValueError);
  EXPECT_THROW(DeviceMesh({1 << 11, 1 << 10}, {"a", "b"}), ValueError);  // 2^21 > the cap
}

}  // namespace
}  // namespace meshlayout
