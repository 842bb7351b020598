#include "meshlayout/layout/shard_geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <set>
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

using testing::ValueErrorMessage;
using testing::HasSubstr;

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

// ---- Property tests over random meshes, layouts and shapes ----

constexpr int64_t kPropertyDeviceCount = 128;  // 5 * 5 * 5 = 125 fits
constexpr int kPropertyCases = 400;
constexpr uint64_t kDefaultSeed = 20240611;

uint64_t PropertySeed() {
  const char* env = std::getenv("MESHLAYOUT_TEST_SEED");
  if (env == nullptr || *env == '\0') return kDefaultSeed;
  return std::stoull(env);
}

struct RandomCase {
  DeviceMesh mesh;
  TensorLayout layout;
  Shape shape;

  std::string describe() const {
    return "mesh " + mesh.to_string() + ", layout " + layout.to_string() + ", shape " +
           shape_to_string(shape);
  }
};

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Mesh of rank 1-3 with axis sizes 1-5 (devices in order, or a random sample in random
// order); a layout using each mesh axis at most once, 0-2 axes per dimension; a shape of
// rank 0-3 whose extents come from a small set or lie below the dimension's block count.
RandomCase MakeRandomCase(std::mt19937_64& rng) {
  Names pool{"data", "model", "x", "y", "batch_2"};
  std::shuffle(pool.begin(), pool.end(), rng);
  const int mesh_rank = static_cast<int>(Uniform(rng, 1, 3));
  Ints mesh_shape;
  Names axis_names;
  int64_t total = 1;
  for (int a = 0; a < mesh_rank; ++a) {
    mesh_shape.push_back(Uniform(rng, 1, 5));
    axis_names.push_back(pool[static_cast<size_t>(a)]);
    total *= mesh_shape.back();
  }
  // Devices cpu:0 … cpu:total-1 in order, or a random sample of the known ones in random order.
  Ints ids(static_cast<size_t>(kPropertyDeviceCount));
  std::iota(ids.begin(), ids.end(), 0);
  if (Uniform(rng, 0, 1) == 1) std::shuffle(ids.begin(), ids.end(), rng);
  Names devices;
  for (int64_t i = 0; i < total; ++i) devices.push_back(device_name(ids[static_cast<size_t>(i)]));
  DeviceMesh mesh(mesh_shape, axis_names, devices);

  std::vector<int> axes(static_cast<size_t>(mesh_rank));
  std::iota(axes.begin(), axes.end(), 0);
  std::shuffle(axes.begin(), axes.end(), rng);
  size_t next_axis = 0;
  const int tensor_rank = static_cast<int>(Uniform(rng, 0, 3));
  std::vector<DimSharding> dims;
  Shape shape;
  static constexpr int64_t kExtents[] = {0, 1, 2, 3, 5, 7, 11, 13};
  for (int d = 0; d < tensor_rank; ++d) {
    const size_t take = std::min(static_cast<size_t>(Uniform(rng, 0, 2)), axes.size() - next_axis);
    Names dim_axes;
    int64_t blocks = 1;
    for (size_t j = 0; j < take; ++j) {
      const int a = axes[next_axis++];
      dim_axes.push_back(axis_names[static_cast<size_t>(a)]);
      blocks *= mesh_shape[static_cast<size_t>(a)];
    }
    dims.emplace_back(std::move(dim_axes));
    if (Uniform(rng, 0, 3) == 0) {
      shape.push_back(Uniform(rng, 0, blocks - 1));  // fewer elements than blocks
    } else {
      shape.push_back(kExtents[Uniform(rng, 0, std::size(kExtents) - 1)]);
    }
  }
  return RandomCase{mesh, TensorLayout(std::move(dims), mesh), shape};
}

// Calls f(flat row-major index in `shape`) for every element of `box`.
void ForEachElement(const Box& box, const Shape& shape, const std::function<void(int64_t)>& f) {
  if (box.empty()) return;
  const size_t rank = shape.size();
  Ints index(box.offset);
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) flat = flat * shape[d] + index[d];
    f(flat);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++index[d] < box.offset[d] + box.shape[d]) break;
      index[d] = box.offset[d];
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

// Mesh coordinates computed independently of DeviceMesh::coords.
Ints ReferenceCoords(const DeviceMesh& mesh, int64_t position) {
  Ints strides(mesh.shape().size(), 1);
  for (size_t a = mesh.shape().size() - 1; a > 0; --a) {
    strides[a - 1] = strides[a] * mesh.shape()[a];
  }
  Ints coords;
  for (size_t a = 0; a < strides.size(); ++a)
    coords.push_back(position / strides[a] % mesh.shape()[a]);
  return coords;
}

int64_t AxisPosition(const DeviceMesh& mesh, const std::string& name) {
  const Names& names = mesh.axis_names();
  return std::find(names.begin(), names.end(), name) - names.begin();
}

int64_t ReferenceBlocks(const DeviceMesh& mesh, const DimSharding& dim) {
  int64_t k = 1;
  for (const std::string& name : dim.axes())
    k *= mesh.shape()[static_cast<size_t>(AxisPosition(mesh, name))];
  return k;
}

// DESIGN §2's rule written out again: block index major-first, blocks of ceil(n/k).
Box ReferenceBox(const RandomCase& c, int64_t position) {
  const Ints coords = ReferenceCoords(c.mesh, position);
  Box box;
  for (size_t d = 0; d < c.shape.size(); ++d) {
    int64_t index = 0;
    int64_t k = 1;
    for (const std::string& name : c.layout.axes()[d].axes()) {
      const size_t a = static_cast<size_t>(AxisPosition(c.mesh, name));
      index = index * c.mesh.shape()[a] + coords[a];
      k *= c.mesh.shape()[a];
    }
    const int64_t n = c.shape[d];
    const int64_t size = n / k + (n % k != 0 ? 1 : 0);
    const int64_t start = std::min(index * size, n);
    const int64_t end = std::min(start + size, n);
    box.offset.push_back(start);
    box.shape.push_back(end - start);
  }
  return box;
}

void CheckRandomCase(const RandomCase& c) {
  std::optional<ShardGeometry> geometry;
  try {
    geometry.emplace(c.layout, c.shape);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-strict ShardGeometry threw: " << e.what();
    return;
  }
  const ShardGeometry& g = *geometry;
  const int64_t devices = c.mesh.size();
  const int64_t elements = num_elements(c.shape);

  int64_t blocks_total = 1;
  for (int d = 0; d < g.rank(); ++d) {
    ASSERT_EQ(g.num_blocks(d), ReferenceBlocks(c.mesh, c.layout.axes()[static_cast<size_t>(d)]))
        << "dimension " << d;
    blocks_total *= g.num_blocks(d);
  }
  int64_t expected_replicas = 1;
  const Names used = c.layout.used_axes();
  for (size_t a = 0; a < c.mesh.axis_names().size(); ++a) {
    if (std::find(used.begin(), used.end(), c.mesh.axis_names()[a]) == used.end()) {
      expected_replicas *= c.mesh.shape()[a];
    }
  }
  ASSERT_EQ(g.num_replicas(), expected_replicas);
  ASSERT_EQ(blocks_total * g.num_replicas(), devices);

  std::vector<Box> boxes;
  for (int64_t p = 0; p < devices; ++p) {
    boxes.push_back(g.box(p));
    ASSERT_EQ(boxes.back().to_string(), ReferenceBox(c, p).to_string()) << "position " << p;
  }

  // (a) Each replica's devices tile the tensor exactly once.
  std::vector<int> replica_hits(static_cast<size_t>(devices), 0);
  for (int64_t r = 0; r < g.num_replicas(); ++r) {
    const Ints members = g.replica_devices(r);
    ASSERT_EQ(static_cast<int64_t>(members.size()), blocks_total) << "replica " << r;
    std::vector<int> count(static_cast<size_t>(elements), 0);
    for (int64_t p : members) {
      ASSERT_EQ(g.replica_of(p), r) << "position " << p;
      ++replica_hits[static_cast<size_t>(p)];
      ForEachElement(boxes[static_cast<size_t>(p)], c.shape,
                     [&](int64_t i) { ++count[static_cast<size_t>(i)]; });
    }
    for (int64_t i = 0; i < elements; ++i) {
      ASSERT_EQ(count[static_cast<size_t>(i)], 1) << "replica " << r << ", flat element " << i;
    }
  }
  for (int64_t p = 0; p < devices; ++p) {
    ASSERT_EQ(replica_hits[static_cast<size_t>(p)], 1) << "position " << p << " in replicas";
  }

  // (b) Every element is held by exactly num_replicas() devices.
  std::vector<int64_t> held(static_cast<size_t>(elements), 0);
  for (const Box& box : boxes) {
    ForEachElement(box, c.shape, [&](int64_t i) { ++held[static_cast<size_t>(i)]; });
  }
  for (int64_t i = 0; i < elements; ++i) {
    ASSERT_EQ(held[static_cast<size_t>(i)], g.num_replicas()) << "flat element " << i;
  }

  // (c) Shard groups partition the devices; members share a block and a box, one per replica.
  const std::vector<Ints> groups = g.shard_groups();
  ASSERT_EQ(static_cast<int64_t>(groups.size()), blocks_total);
  std::vector<int> group_hits(static_cast<size_t>(devices), 0);
  std::optional<Ints> previous_block;
  for (const Ints& group : groups) {
    ASSERT_EQ(static_cast<int64_t>(group.size()), g.num_replicas());
    Ints block;
    for (int d = 0; d < g.rank(); ++d) block.push_back(g.block_index(group.front(), d));
    if (previous_block) {
      ASSERT_LT(*previous_block, block) << "groups not in row-major order";
    }
    previous_block = block;
    std::set<int64_t> replicas;
    for (int64_t p : group) {
      ++group_hits[static_cast<size_t>(p)];
      ASSERT_EQ(boxes[static_cast<size_t>(p)].to_string(),
                boxes[static_cast<size_t>(group.front())].to_string())
          << "positions " << group.front() << " and " << p;
      for (int d = 0; d < g.rank(); ++d)
        ASSERT_EQ(g.block_index(p, d), block[static_cast<size_t>(d)]);
      replicas.insert(g.replica_of(p));
    }
    ASSERT_EQ(static_cast<int64_t>(replicas.size()), g.num_replicas());
  }
  for (int64_t p = 0; p < devices; ++p) {
    ASSERT_EQ(group_hits[static_cast<size_t>(p)], 1) << "position " << p << " in groups";
  }

  // (d) No box exceeds max_box_elements(), and some box reaches it.
  int64_t largest = 0;
  for (int64_t p = 0; p < devices; ++p) {
    ASSERT_LE(boxes[static_cast<size_t>(p)].num_elements(), g.max_box_elements())
        << "position " << p;
    largest = std::max(largest, boxes[static_cast<size_t>(p)].num_elements());
  }
  ASSERT_EQ(largest, g.max_box_elements());

  // (e) Strict mode throws exactly when some dimension is uneven.
  std::vector<int> expected_uneven;
  for (size_t d = 0; d < c.shape.size(); ++d) {
    if (c.shape[d] % g.num_blocks(static_cast<int>(d)) != 0)
      expected_uneven.push_back(static_cast<int>(d));
  }
  const std::vector<UnevenDim> uneven = g.uneven_dims();
  std::vector<int> uneven_indices;
  for (const UnevenDim& u : uneven) {
    uneven_indices.push_back(u.dim);
    ASSERT_EQ(u.size, c.shape[static_cast<size_t>(u.dim)]);
    ASSERT_EQ(u.parts, g.num_blocks(u.dim));
    ASSERT_EQ(u.axes, c.layout.axes()[static_cast<size_t>(u.dim)].axes());
  }
  ASSERT_EQ(uneven_indices, expected_uneven);
  const std::string strict_error =
      ValueErrorMessage([&] { ShardGeometry(c.layout, c.shape, GeometryOptions{.strict = true}); });
  if (uneven.empty()) {
    ASSERT_EQ(strict_error, "<nothing thrown>");
  } else {
    const UnevenDim& first = uneven.front();
    ASSERT_TRUE(HasSubstr(strict_error, "dimension " + std::to_string(first.dim) + " (size " +
                                            std::to_string(first.size) + ")"));
    ASSERT_TRUE(HasSubstr(strict_error, "of total size " + std::to_string(first.parts)));
  }

  // The text forms round-trip for every generated mesh and layout.
  ASSERT_TRUE(DeviceMesh::from_string(c.mesh.to_string()) == c.mesh);
  ASSERT_EQ(TensorLayout::from_string(c.layout.to_string()), c.layout);
}

class ShardGeometryPropertyTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(kPropertyDeviceCount); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(ShardGeometryPropertyTest, RandomLayoutsTileTheTensorOncePerReplica) {
  const uint64_t seed = PropertySeed();
  RecordProperty("MESHLAYOUT_TEST_SEED", std::to_string(seed));
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  int uneven_cases = 0;
  int replicated_cases = 0;
  int empty_box_cases = 0;
  for (int i = 0; i < kPropertyCases; ++i) {
    const RandomCase c = MakeRandomCase(rng);
    SCOPED_TRACE("case " + std::to_string(i) + ": " + c.describe());
    CheckRandomCase(c);
    if (HasFailure()) return;  // the first failing case is the one worth reading
    ShardGeometry g(c.layout, c.shape);
    uneven_cases += g.is_uneven() ? 1 : 0;
    replicated_cases += g.num_replicas() > 1 ? 1 : 0;
    bool some_empty = false;
    for (int64_t p = 0; p < c.mesh.size(); ++p) some_empty = some_empty || g.box(p).empty();
    empty_box_cases += some_empty && num_elements(c.shape) > 0 ? 1 : 0;
  }
  // The generator must actually reach the interesting regions.
  EXPECT_GT(uneven_cases, kPropertyCases / 10);
  EXPECT_GT(replicated_cases, kPropertyCases / 10);
  EXPECT_GT(empty_box_cases, kPropertyCases / 20);
}

}  // namespace
}  // namespace meshlayout
