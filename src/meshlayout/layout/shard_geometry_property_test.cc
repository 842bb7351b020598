// shard_geometry_property_test.cc — property tests over random meshes, layouts and shapes:
// every generated case is checked against DESIGN §2's rule written out independently (boxes,
// block counts, replicas, shard groups, uneven dimensions and strict mode). The seed comes
// from MESHLAYOUT_TEST_SEED when set.
#include "meshlayout/layout/shard_geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
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
