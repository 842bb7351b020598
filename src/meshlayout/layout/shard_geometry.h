// shard_geometry.h — which box of a tensor each device of a mesh holds under a layout.
//
// The one rule (DESIGN §2): a dimension of size n split over axes of total size k is cut into
// k blocks of c = ceil(n / k); block i is [min(i*c, n), min((i+1)*c, n)) — XLA/JAX tiling,
// the last blocks may be short or empty. Several axes on one dimension flatten major-first:
// under P(('data','model')) the device at (d, m) holds block d*|model| + m. Mesh axes the
// layout does not use hold replicas. ShardGeometry::box() is the single implementation every
// module (init, reshard, checkpoint I/O, visualisation) uses.
//
// Example (numpy meaning): shape (8, 6), layout[data,None] on mesh[data=2,model=4]:
//   device at position p holds x[4*(p/4) : 4*(p/4)+4, 0:6]
//   ShardGeometry g(layout, {8, 6});
//   g.box(5).to_string();   // "[4:8, 0:6]"
//   g.num_replicas();       // 4 (the 'model' axis holds copies)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/core/shape.h"
#include "meshlayout/layout/tensor_layout.h"

namespace meshlayout {

/// A hyper-rectangle of a tensor: per dimension, a start offset and an extent.
struct Box {
  Shape offset;
  Shape shape;

  int64_t num_elements() const { return meshlayout::num_elements(shape); }
  bool empty() const { return num_elements() == 0; }
  /// numpy slice form: `[0:4, 0:6]`.
  std::string to_string() const;
  friend bool operator==(const Box&, const Box&) = default;
};

/// [start, end) of block `i` when a dimension of size `n` is cut into `k` ceil-sized blocks.
std::pair<int64_t, int64_t> block_range(int64_t n, int64_t k, int64_t i);

/// A dimension whose size is not a multiple of its number of blocks.
struct UnevenDim {
  int dim;
  int64_t size;
  int64_t parts;
  std::vector<std::string> axes;
};

struct GeometryOptions {
  /// Refuse uneven splits (ValueError naming the dimension, its size and the axis size).
  bool strict = false;
};

/// The shard boxes of a tensor of `shape` under a layout that has a mesh.
/// Devices are named by their row-major position in the mesh (0 … mesh.size()-1).
class ShardGeometry {
 public:
  /// Throws ValueError if the layout has no mesh, the rank differs, or (strict) a split is
  /// uneven. `what` names the tensor in messages, for example "variable 'd1.kernel'".
  ShardGeometry(TensorLayout layout, Shape shape, const GeometryOptions& options = {},
                std::string_view what = "tensor");

  const TensorLayout& layout() const { return layout_; }
  const DeviceMesh& mesh() const { return *layout_.device_mesh(); }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }

  /// Number of blocks dimension `dim` is cut into (product of its axes' sizes).
  int64_t num_blocks(int dim) const { return blocks_[static_cast<size_t>(dim)]; }
  /// Which block of `dim` the device at `position` holds.
  int64_t block_index(int64_t position, int dim) const;
  /// The box the device at `position` holds.
  Box box(int64_t position) const;
  /// The box of a block given its index per dimension.
  Box block_box(const std::vector<int64_t>& block) const;

  /// Number of full copies of the tensor across the mesh (product of unused axes' sizes).
  int64_t num_replicas() const { return num_replicas_; }
  /// Which copy the device at `position` belongs to.
  int64_t replica_of(int64_t position) const;
  /// Positions that together hold copy `replica`, one per block (they tile the tensor once).
  std::vector<int64_t> replica_devices(int64_t replica) const;
  /// Positions holding the same block, grouped; groups ordered by block, row-major.
  std::vector<std::vector<int64_t>> shard_groups() const;

  /// Dimensions whose size is not a multiple of their number of blocks.
  std::vector<UnevenDim> uneven_dims() const;
  bool is_uneven() const { return !uneven_dims().empty(); }
  /// Elements in the largest box (the memory each device must hold for this tensor).
  int64_t max_box_elements() const;

 private:
  TensorLayout layout_;
  Shape shape_;
  std::vector<std::vector<int>> dim_axes_;  // mesh axis indices per tensor dim, major first
  std::vector<int64_t> blocks_;             // blocks per tensor dim
  std::vector<int> unused_axes_;            // mesh axes holding replicas, in mesh order
  int64_t num_replicas_ = 1;
};

}  // namespace meshlayout
