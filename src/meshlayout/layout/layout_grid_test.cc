#include "meshlayout/layout/layout_grid.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::ValueErrorMessage;

using Names = std::vector<std::string>;

class LayoutGridTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }

  std::string Grid(const TensorLayout& layout, const Shape& shape) {
    return render_layout_grid(ShardGeometry(layout, shape));
  }

  DeviceMesh mesh_{DeviceMesh({2, 4}, {"data", "model"})};
};

TEST_F(LayoutGridTest, RowShardedMatrixAsInTheHeader) {
  EXPECT_EQ(Grid(TensorLayout({"data", None}, mesh_), {8, 6}),
            "+-------------------------+\n"
            "| cpu:0,cpu:1,cpu:2,cpu:3 |\n"
            "| [0:4, 0:6]              |\n"
            "+-------------------------+\n"
            "| cpu:4,cpu:5,cpu:6,cpu:7 |\n"
            "| [4:8, 0:6]              |\n"
            "+-------------------------+\n");
}

TEST_F(LayoutGridTest, VectorIsOneRow) {
  EXPECT_EQ(Grid(TensorLayout({"model"}, mesh_), {8}),
            "+-------------+-------------+-------------+-------------+\n"
            "| cpu:0,cpu:4 | cpu:1,cpu:5 | cpu:2,cpu:6 | cpu:3,cpu:7 |\n"
            "| [0:2]       | [2:4]       | [4:6]       | [6:8]       |\n"
            "+-------------+-------------+-------------+-------------+\n");
}

TEST_F(LayoutGridTest, MatrixShardedOnBothDimensions) {
  EXPECT_EQ(Grid(TensorLayout({"data", "model"}, mesh_), {4, 8}),
            "+------------+------------+------------+------------+\n"
            "| cpu:0      | cpu:1      | cpu:2      | cpu:3      |\n"
            "| [0:2, 0:2] | [0:2, 2:4] | [0:2, 4:6] | [0:2, 6:8] |\n"
            "+------------+------------+------------+------------+\n"
            "| cpu:4      | cpu:5      | cpu:6      | cpu:7      |\n"
            "| [2:4, 0:2] | [2:4, 2:4] | [2:4, 4:6] | [2:4, 6:8] |\n"
            "+------------+------------+------------+------------+\n");
}

TEST_F(LayoutGridTest, UnevenVectorShowsTheEmptyBlock) {
  // ceil(6/4) = 2: blocks [0:2] [2:4] [4:6] [6:6].
  EXPECT_EQ(Grid(TensorLayout({"model"}, mesh_), {6}),
            "+-------------+-------------+-------------+-------------+\n"
            "| cpu:0,cpu:4 | cpu:1,cpu:5 | cpu:2,cpu:6 | cpu:3,cpu:7 |\n"
            "| [0:2]       | [2:4]       | [4:6]       | [6:6] empty |\n"
            "+-------------+-------------+-------------+-------------+\n");
}

TEST_F(LayoutGridTest, UnevenMatrixWidensOnlyTheColumnWithEmptyBlocks) {
  EXPECT_EQ(Grid(TensorLayout({"data", "model"}, mesh_), {3, 6}),
            "+------------+------------+------------+------------------+\n"
            "| cpu:0      | cpu:1      | cpu:2      | cpu:3            |\n"
            "| [0:2, 0:2] | [0:2, 2:4] | [0:2, 4:6] | [0:2, 6:6] empty |\n"
            "+------------+------------+------------+------------------+\n"
            "| cpu:4      | cpu:5      | cpu:6      | cpu:7            |\n"
            "| [2:3, 0:2] | [2:3, 2:4] | [2:3, 4:6] | [2:3, 6:6] empty |\n"
            "+------------+------------+------------+------------------+\n");
}

TEST_F(LayoutGridTest, MultiAxisDimensionHasOneColumnPerBlock) {
  EXPECT_EQ(Grid(TensorLayout({{"data", "model"}}, mesh_), {10}),
            "+-------+-------+-------+-------+--------+---------------+---------------+"
            "---------------+\n"
            "| cpu:0 | cpu:1 | cpu:2 | cpu:3 | cpu:4  | cpu:5         | cpu:6         | "
            "cpu:7         |\n"
            "| [0:2] | [2:4] | [4:6] | [6:8] | [8:10] | [10:10] empty | [10:10] empty | "
            "[10:10] empty |\n"
            "+-------+-------+-------+-------+--------+---------------+---------------+"
            "---------------+\n");
}

TEST_F(LayoutGridTest, RankZeroIsOneCell) {
  DeviceMesh mesh({2}, {"a"}, Names{"cpu:0", "cpu:1"});
  EXPECT_EQ(Grid(TensorLayout::replicated(0, mesh), {}),
            "+-------------+\n"
            "| cpu:0,cpu:1 |\n"
            "| []          |\n"
            "+-------------+\n");
}

TEST_F(LayoutGridTest, NamesDevicesNotPositions) {
  DeviceMesh mesh({2}, {"a"}, Names{"cpu:1", "cpu:0"});
  EXPECT_EQ(Grid(TensorLayout({"a"}, mesh), {4}),
            "+-------+-------+\n"
            "| cpu:1 | cpu:0 |\n"
            "| [0:2] | [2:4] |\n"
            "+-------+-------+\n");
}

TEST_F(LayoutGridTest, RejectsRankThree) {
  ShardGeometry g(TensorLayout({"data", None, None}, mesh_), {2, 2, 2});
  EXPECT_EQ(ValueErrorMessage([&] { render_layout_grid(g); }),
            "a layout grid draws tensors of rank 0, 1 or 2; shape (2, 2, 2) has rank 3 (use the "
            "per-device box list instead)");
}

TEST_F(LayoutGridTest, DeviceBoxesListEveryDevice) {
  DeviceMesh mesh({2, 2}, {"data", "model"}, Names{"cpu:0", "cpu:1", "cpu:2", "cpu:3"});
  EXPECT_EQ(render_device_boxes(ShardGeometry(TensorLayout({"data", None}, mesh), {4, 2})),
            "cpu:0  coords (0, 0)  box [0:2, 0:2]  shape (2, 2)  4 elements  replica 0\n"
            "cpu:1  coords (0, 1)  box [0:2, 0:2]  shape (2, 2)  4 elements  replica 1\n"
            "cpu:2  coords (1, 0)  box [2:4, 0:2]  shape (2, 2)  4 elements  replica 0\n"
            "cpu:3  coords (1, 1)  box [2:4, 0:2]  shape (2, 2)  4 elements  replica 1\n");
}

TEST_F(LayoutGridTest, DeviceBoxesPadDeviceNamesAndShowEmptyBoxes) {
  set_device_count(12);
  DeviceMesh mesh({3}, {"a"}, Names{"cpu:10", "cpu:3", "cpu:11"});
  EXPECT_EQ(render_device_boxes(ShardGeometry(TensorLayout({"a"}, mesh), {2})),
            "cpu:10  coords (0,)  box [0:1]  shape (1,)  1 elements  replica 0\n"
            "cpu:3   coords (1,)  box [1:2]  shape (1,)  1 elements  replica 0\n"
            "cpu:11  coords (2,)  box [2:2]  shape (0,)  0 elements  replica 0\n");
}

TEST_F(LayoutGridTest, DeviceBoxesWorkForRankThree) {
  DeviceMesh mesh({2}, {"a"}, Names{"cpu:0", "cpu:1"});
  EXPECT_EQ(render_device_boxes(ShardGeometry(TensorLayout({None, "a", None}, mesh), {1, 4, 2})),
            "cpu:0  coords (0,)  box [0:1, 0:2, 0:2]  shape (1, 2, 2)  4 elements  replica 0\n"
            "cpu:1  coords (1,)  box [0:1, 2:4, 0:2]  shape (1, 2, 2)  4 elements  replica 0\n");
}

}  // namespace
}  // namespace meshlayout
