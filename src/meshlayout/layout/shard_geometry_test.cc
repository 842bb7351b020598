// shard_geometry_test.cc — ShardGeometry on hand-computed cases: block_range's ceiling rule,
// Box text, the boxes, replicas and shard groups of small layouts, uneven dimensions, strict
// mode and the errors for invalid layouts, shapes and positions. Random layouts are checked in
// shard_geometry_property_test.cc, int64 edge sizes in shard_geometry_limits_test.cc.
#include "meshlayout/layout/shard_geometry.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::HasSubstr;
using testing::ValueErrorMessage;

using Names = std::vector<std::string>;
using Ints = std::vector<int64_t>;
using Range = std::pair<int64_t, int64_t>;

std::vector<Range> AllBlocks(int64_t n, int64_t k) {
  std::vector<Range> out;
  for (int64_t i = 0; i < k; ++i) out.push_back(block_range(n, k, i));
  return out;
}

std::vector<std::string> BoxStrings(const ShardGeometry& g) {
  std::vector<std::string> out;
  for (int64_t p = 0; p < g.mesh().size(); ++p) out.push_back(g.box(p).to_string());
  return out;
}

class ShardGeometryTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }

  DeviceMesh mesh_{DeviceMesh({2, 4}, {"data", "model"})};
};

// ---- block_range ----

TEST(BlockRangeTest, EmptyDimensionGivesEmptyBlocks) {
  EXPECT_EQ(AllBlocks(0, 4), (std::vector<Range>{{0, 0}, {0, 0}, {0, 0}, {0, 0}}));
  EXPECT_EQ(AllBlocks(0, 1), (std::vector<Range>{{0, 0}}));
}

TEST(BlockRangeTest, FewerElementsThanBlocksLeavesTrailingBlocksEmpty) {
  EXPECT_EQ(AllBlocks(3, 8),
            (std::vector<Range>{{0, 1}, {1, 2}, {2, 3}, {3, 3}, {3, 3}, {3, 3}, {3, 3}, {3, 3}}));
}

TEST(BlockRangeTest, PrimeSizeUsesCeilingBlocks) {
  EXPECT_EQ(AllBlocks(7, 3), (std::vector<Range>{{0, 3}, {3, 6}, {6, 7}}));
  EXPECT_EQ(AllBlocks(13, 4), (std::vector<Range>{{0, 4}, {4, 8}, {8, 12}, {12, 13}}));
  EXPECT_EQ(AllBlocks(11, 5), (std::vector<Range>{{0, 3}, {3, 6}, {6, 9}, {9, 11}, {11, 11}}));
}

TEST(BlockRangeTest, ExactSplitGivesEqualBlocks) {
  EXPECT_EQ(AllBlocks(8, 4), (std::vector<Range>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(AllBlocks(5, 1), (std::vector<Range>{{0, 5}}));
}

TEST(BlockRangeTest, CeilingRuleCanEmptyTheLastBlockEvenWhenSizeExceedsBlocks) {
  // XLA/JAX tiling, not "spread the remainder": 9 over 4 is 3,3,3,0, not 3,2,2,2.
  EXPECT_EQ(AllBlocks(9, 4), (std::vector<Range>{{0, 3}, {3, 6}, {6, 9}, {9, 9}}));
  EXPECT_EQ(AllBlocks(10, 4), (std::vector<Range>{{0, 3}, {3, 6}, {6, 9}, {9, 10}}));
}

TEST(BlockRangeTest, BlocksAreContiguousAndCoverTheDimension) {
  for (int64_t n = 0; n <= 40; ++n) {
    for (int64_t k = 1; k <= 12; ++k) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
      const int64_t c = (n + k - 1) / k;
      int64_t expected_start = 0;
      int64_t previous_size = c;
      for (int64_t i = 0; i < k; ++i) {
        auto [start, end] = block_range(n, k, i);
        ASSERT_EQ(start, expected_start) << "block " << i;
        ASSERT_LE(start, end) << "block " << i;
        ASSERT_LE(end - start, previous_size) << "block " << i;  // sizes never grow
        previous_size = end - start;
        expected_start = end;
      }
      ASSERT_EQ(expected_start, n);
    }
  }
}

// ---- Box ----

TEST(BoxTest, NumpySliceTextAndElementCount) {
  Box box{{4, 0}, {4, 6}};
  EXPECT_EQ(box.to_string(), "[4:8, 0:6]");
  EXPECT_EQ(box.num_elements(), 24);
  EXPECT_FALSE(box.empty());
  Box empty{{10}, {0}};
  EXPECT_EQ(empty.to_string(), "[10:10]");
  EXPECT_TRUE(empty.empty());
  Box scalar{{}, {}};
  EXPECT_EQ(scalar.to_string(), "[]");
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_FALSE(scalar.empty());
}

// ---- Hand-computed geometries ----

TEST_F(ShardGeometryTest, RowShardedMatrixReplicatesOverTheUnusedAxis) {
  ShardGeometry g(TensorLayout({"data", None}, mesh_), {8, 6});
  EXPECT_EQ(g.box(5).to_string(), "[4:8, 0:6]");
  EXPECT_EQ(g.box(5), (Box{{4, 0}, {4, 6}}));
  EXPECT_EQ(BoxStrings(g), (Names{"[0:4, 0:6]", "[0:4, 0:6]", "[0:4, 0:6]", "[0:4, 0:6]",
                                  "[4:8, 0:6]", "[4:8, 0:6]", "[4:8, 0:6]", "[4:8, 0:6]"}));
  EXPECT_EQ(g.num_blocks(0), 2);
  EXPECT_EQ(g.num_blocks(1), 1);
  EXPECT_EQ(g.num_replicas(), 4);
  EXPECT_EQ(g.rank(), 2);
  EXPECT_EQ(g.shape(), (Shape{8, 6}));
  EXPECT_TRUE(g.mesh() == mesh_);
  EXPECT_EQ(g.max_box_elements(), 24);
  EXPECT_FALSE(g.is_uneven());
}

TEST_F(ShardGeometryTest, MultiAxisDimensionFlattensMajorFirst) {
  // P(('data','model')) on (10,): 8 blocks of ceil(10/8) = 2.
  ShardGeometry g(TensorLayout({{"data", "model"}}, mesh_), {10});
  EXPECT_EQ(BoxStrings(g),
            (Names{"[0:2]", "[2:4]", "[4:6]", "[6:8]", "[8:10]", "[10:10]", "[10:10]", "[10:10]"}));
  EXPECT_EQ(g.num_blocks(0), 8);
  EXPECT_EQ(g.num_replicas(), 1);
  EXPECT_EQ(g.max_box_elements(), 2);
  EXPECT_TRUE(g.box(6).empty());
}

TEST_F(ShardGeometryTest, MultiAxisDimensionFollowsTheListedOrder) {
  // P(('model','data')) on (8,): the device at (d, m) holds block m * 2 + d.
  ShardGeometry g(TensorLayout({{"model", "data"}}, mesh_), {8});
  EXPECT_EQ(BoxStrings(g),
            (Names{"[0:1]", "[2:3]", "[4:5]", "[6:7]", "[1:2]", "[3:4]", "[5:6]", "[7:8]"}));
  EXPECT_EQ(g.block_index(5, 0), 3);
}

TEST_F(ShardGeometryTest, BothDimensionsSharded) {
  // Dim 0 over 'model' (4 blocks of 1), dim 1 over 'data' (2 blocks of 4).
  ShardGeometry g(TensorLayout({"model", "data"}, mesh_), {4, 8});
  EXPECT_EQ(BoxStrings(g), (Names{"[0:1, 0:4]", "[1:2, 0:4]", "[2:3, 0:4]", "[3:4, 0:4]",
                                  "[0:1, 4:8]", "[1:2, 4:8]", "[2:3, 4:8]", "[3:4, 4:8]"}));
  EXPECT_EQ(g.num_replicas(), 1);
  EXPECT_EQ(g.block_index(6, 0), 2);
  EXPECT_EQ(g.block_index(6, 1), 1);
  EXPECT_EQ(g.block_box({2, 1}), (Box{{2, 4}, {1, 4}}));
}

TEST_F(ShardGeometryTest, RankZeroTensorIsReplicatedEverywhere) {
  ShardGeometry g(TensorLayout::replicated(0, mesh_), {});
  for (int64_t p = 0; p < mesh_.size(); ++p) EXPECT_EQ(g.box(p), (Box{{}, {}}));
  EXPECT_EQ(g.num_replicas(), 8);
  EXPECT_EQ(g.max_box_elements(), 1);
  EXPECT_EQ(g.shard_groups(), (std::vector<Ints>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_TRUE(g.uneven_dims().empty());
}

TEST_F(ShardGeometryTest, ReplicasRunOverTheUnusedAxesInMeshOrder) {
  set_device_count(12);
  DeviceMesh mesh({2, 3, 2}, {"a", "b", "c"});
  ShardGeometry g(TensorLayout({"b"}, mesh), {6});
  EXPECT_EQ(g.num_replicas(), 4);  // |a| * |c|
  // replica = a * |c| + c
  EXPECT_EQ(g.replica_of(0), 0);
  EXPECT_EQ(g.replica_of(5), 1);   // coords (0, 2, 1)
  EXPECT_EQ(g.replica_of(6), 2);   // coords (1, 0, 0)
  EXPECT_EQ(g.replica_of(11), 3);  // coords (1, 2, 1)
  EXPECT_EQ(g.replica_devices(0), (Ints{0, 2, 4}));
  EXPECT_EQ(g.replica_devices(1), (Ints{1, 3, 5}));
  EXPECT_EQ(g.replica_devices(3), (Ints{7, 9, 11}));
  EXPECT_EQ(g.box(9).to_string(), "[2:4]");  // coords (1, 1, 1)
}

TEST_F(ShardGeometryTest, ShardGroupsCollectDevicesHoldingTheSameBlock) {
  ShardGeometry rows(TensorLayout({"data", None}, mesh_), {8, 6});
  EXPECT_EQ(rows.shard_groups(), (std::vector<Ints>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  ShardGeometry cols(TensorLayout({"model", None}, mesh_), {8, 6});
  EXPECT_EQ(cols.shard_groups(), (std::vector<Ints>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  ShardGeometry both(TensorLayout({"model", "data"}, mesh_), {4, 8});
  // Ordered by block (row-major): (0,0) (0,1) (1,0) (1,1) …
  EXPECT_EQ(both.shard_groups(), (std::vector<Ints>{{0}, {4}, {1}, {5}, {2}, {6}, {3}, {7}}));
  ShardGeometry replicated(TensorLayout::replicated(2, mesh_), {3, 3});
  EXPECT_EQ(replicated.shard_groups(), (std::vector<Ints>{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

TEST_F(ShardGeometryTest, UnevenDimsNameTheDimensionSizeAndAxes) {
  ShardGeometry g(TensorLayout({"data", None, {"model"}}, mesh_), {7, 5, 6});
  std::vector<UnevenDim> uneven = g.uneven_dims();
  ASSERT_EQ(uneven.size(), 2u);
  EXPECT_EQ(uneven[0].dim, 0);
  EXPECT_EQ(uneven[0].size, 7);
  EXPECT_EQ(uneven[0].parts, 2);
  EXPECT_EQ(uneven[0].axes, (Names{"data"}));
  EXPECT_EQ(uneven[1].dim, 2);
  EXPECT_EQ(uneven[1].size, 6);
  EXPECT_EQ(uneven[1].parts, 4);
  EXPECT_EQ(uneven[1].axes, (Names{"model"}));
  EXPECT_TRUE(g.is_uneven());

  ShardGeometry even(TensorLayout({"data", None, {"model"}}, mesh_), {8, 5, 0});
  EXPECT_TRUE(even.uneven_dims().empty());
  EXPECT_FALSE(even.is_uneven());
}

TEST_F(ShardGeometryTest, MaxBoxElementsIsTheLargestBox) {
  ShardGeometry g(TensorLayout({"data", "model"}, mesh_), {7, 6});
  EXPECT_EQ(g.max_box_elements(), 8);  // ceil(7/2) * ceil(6/4) = 4 * 2
  EXPECT_EQ(g.box(7).to_string(), "[4:7, 6:6]");
  EXPECT_EQ(g.box(7).num_elements(), 0);
  ShardGeometry empty(TensorLayout({"data", "model"}, mesh_), {0, 6});
  EXPECT_EQ(empty.max_box_elements(), 0);
}

TEST_F(ShardGeometryTest, BoxesUseMeshPositionsNotDeviceIds) {
  DeviceMesh reversed(
      {2, 4}, {"data", "model"},
      Names{"cpu:7", "cpu:6", "cpu:5", "cpu:4", "cpu:3", "cpu:2", "cpu:1", "cpu:0"});
  ShardGeometry g(TensorLayout({"data", None}, reversed), {8, 6});
  EXPECT_EQ(g.box(0).to_string(), "[0:4, 0:6]");  // position 0 is cpu:7
  EXPECT_EQ(g.box(7).to_string(), "[4:8, 0:6]");
}

TEST_F(ShardGeometryTest, StrictModeAcceptsEvenSplits) {
  EXPECT_NO_THROW(ShardGeometry(TensorLayout({"data", "model"}, mesh_), {8, 4},
                                GeometryOptions{.strict = true}));
}

TEST_F(ShardGeometryTest, StrictModeRejectsUnevenSplitNamingDimensionSizeAndAxis) {
  EXPECT_EQ(ValueErrorMessage([&] {
              ShardGeometry(TensorLayout({"data", "model"}, mesh_), {8, 6},
                            GeometryOptions{.strict = true}, "variable 'd1.kernel'");
            }),
            "variable 'd1.kernel' with shape (8, 6) does not fit "
            "layout[data,model]@mesh[data=2,model=4]: dimension 1 (size 6) is split over axis "
            "'model' of total size 4, and 6 is not divisible by 4 (strict mode rejects uneven "
            "shards)");
}

TEST_F(ShardGeometryTest, NonStrictModeAcceptsTheSameUnevenSplit) {
  ShardGeometry g(TensorLayout({"data", "model"}, mesh_), {8, 6});
  EXPECT_EQ(g.box(3).to_string(), "[0:4, 6:6]");
}

TEST_F(ShardGeometryTest, RejectsALayoutWithoutMesh) {
  EXPECT_EQ(ValueErrorMessage([] {
              ShardGeometry(TensorLayout({"data", None}), {8, 6});
            }),
            "tensor has layout layout[data,None] without a device mesh; attach one "
            "(set_device_mesh) or give the LayoutMap a mesh");
}

TEST_F(ShardGeometryTest, RejectsARankMismatchNamingTheTensor) {
  EXPECT_EQ(ValueErrorMessage([&] {
              ShardGeometry(TensorLayout({"data", None}, mesh_), {8}, {}, "variable 'd1.bias'");
            }),
            "variable 'd1.bias' with shape (8,) does not fit "
            "layout[data,None]@mesh[data=2,model=4]: the layout has 2 dimensions, the tensor "
            "has 1");
}

TEST_F(ShardGeometryTest, RejectsANegativeExtent) {
  EXPECT_EQ(ValueErrorMessage([&] {
              ShardGeometry(TensorLayout({"data", None}, mesh_), {-1, 6});
            }),
            "tensor has shape (-1, 6) with a negative extent");
}

TEST_F(ShardGeometryTest, RejectsAPositionOutsideTheMesh) {
  ShardGeometry g(TensorLayout({"data", None}, mesh_), {8, 6});
  EXPECT_EQ(ValueErrorMessage([&] { g.box(8); }),
            "device position 8 is outside mesh[data=2,model=4] (0 … 7)");
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([&] { g.box(-1); }), "device position -1 is outside"));
}

}  // namespace
}  // namespace meshlayout
