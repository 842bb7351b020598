#include "meshlayout/array/reshard_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class ReshardPlanTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
};

TEST_F(ReshardPlanTest, TransposeOfA2x4MeshMovesEachMissingByteOnce) {
  ShardGeometry src(TensorLayout({"data", "model"}, mesh_), {8, 8});
  ShardGeometry dst(TensorLayout({"model", "data"}, mesh_), {8, 8});
  ReshardPlan plan = plan_reshard(src, dst, 4, 8);
  EXPECT_EQ(plan.bytes_moved, plan.minimum_bytes);
  EXPECT_EQ(plan.bytes_moved + plan.bytes_kept, 8 * 8 * 4);
  // Each destination box is covered exactly once by its pieces.
  std::vector<int64_t> covered(8, 0);
  for (const Transfer& t : plan.transfers)
    covered[static_cast<size_t>(t.dst_index)] += t.box.num_elements();
  for (int64_t q = 0; q < 8; ++q)
    EXPECT_EQ(covered[static_cast<size_t>(q)], dst.box(q).num_elements());
}

TEST_F(ReshardPlanTest, ReplicasShareTheSendingLoad) {
  // Source replicated over 'model' (4 copies of each row block); target fully replicated:
  // each missing block should be sent by different holders, not always the first.
  ShardGeometry src(TensorLayout({"data", None}, mesh_), {8, 8});
  ShardGeometry dst(TensorLayout({None, None}, mesh_), {8, 8});
  ReshardPlan plan = plan_reshard(src, dst, 4, 8);
  std::vector<int64_t> sent(8, 0);
  for (const Transfer& t : plan.transfers) {
    if (!t.kept()) sent[static_cast<size_t>(t.src_position)] += t.bytes;
  }
  for (int64_t s : sent) EXPECT_EQ(s, 4 * 8 * 4);  // perfectly balanced: one block each
  EXPECT_EQ(plan.pattern, "all-gather");
}

TEST_F(ReshardPlanTest, PrefersHoldersInTheSameProcess) {
  // 2 processes of 4 devices: process 0 owns cpu:0-3 (data=0), process 1 cpu:4-7 (data=1).
  ShardGeometry src(TensorLayout({"model", None}, mesh_), {8, 8});  // replicated over data
  ShardGeometry dst(TensorLayout({None, None}, mesh_), {8, 8});
  ReshardPlan plan = plan_reshard(src, dst, 4, 4);
  EXPECT_EQ(plan.bytes_between_processes, 0);
  EXPECT_EQ(plan.bytes_moved, plan.minimum_bytes);
}

TEST_F(ReshardPlanTest, UnevenAndEmptyBlocks) {
  DeviceMesh m = DeviceMesh::from_string("mesh[x=8]");
  ShardGeometry src(TensorLayout({"x"}, m), {5});  // blocks 1,1,1,1,1,0,0,0
  ShardGeometry dst(TensorLayout({None}, m), {5});
  ReshardPlan plan = plan_reshard(src, dst, 2, 8);
  EXPECT_EQ(plan.bytes_moved, plan.minimum_bytes);
  EXPECT_EQ(plan.minimum_bytes, (8 * 5 - 5) * 2);
  EXPECT_THAT(plan.to_string(), HasSubstr("cpu:0 -> cpu:0  [0:1]  2 B  (kept)"));
}

TEST_F(ReshardPlanTest, RefusesDifferentShapes) {
  ShardGeometry a(TensorLayout({"data"}, mesh_), {8});
  ShardGeometry b(TensorLayout({"data"}, mesh_), {6});
  EXPECT_THROW(plan_reshard(a, b, 4, 8), ValueError);
}

}  // namespace
}  // namespace meshlayout
