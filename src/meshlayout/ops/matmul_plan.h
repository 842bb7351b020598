// matmul_plan.h — the sharding rules of matmul (matmul.h): which layout the local products use,
// which reshards come first, how partial sums are completed, and the layout of the result.
// Pure: layouts and shapes in, a plan out; every process computes the same plan.
//
// Notation: x has shape (b..., K) and layout (Bx..., Kx); w has shape (K, N) and layout
// (Kw, Nw). Each entry names the mesh axes that dimension is split over (None: none).
//
// | x layout (b..., K) | w layout (K, N) | output layout (b..., N) | communication              |
// |--------------------|-----------------|-------------------------|----------------------------|
// | (B..., None)       | (None, None)    | (B..., None)            | none (batch / data par.)   |
// | (B..., None)       | (None, n)       | (B..., n)               | none (column parallel)     |
// | (B..., a)          | (a, None)       | (B..., None)            | all-reduce over a (row p.) |
// | (B..., a)          | (a, n)          | (B..., n)               | all-reduce over a          |
// | (B..., a)          | (a, ...)        | output_layout (option)  | reduce-scatter over a      |
// | anything else      |                 | after a reshard         | see below                  |
// B, a and n stand for any axes (a may be several, e.g. (data,model)); the rules hold when
// x's K and w's K are split over the same axes (Kx == Kw, in the same order) and no axis
// splits both a batch dim of x and w's N dim. The local product of a device is then
// x_shard @ w_shard (one BLAS call), the block (B..., n) of the output — a partial sum over
// the contracted axes a when Kx is not None. Mesh axes no operand uses hold replicas: every
// device of a replica computes the same block.
//
// A pair of the table is never resharded. Any other pair is resharded first
// (distribute_tensor) to the candidate that moves the fewest bytes, counting the operand
// reshards and the completion of the partial sums: K split over Kx (reshard w), over Kw
// (reshard x) or over nothing (both), and an axis used by both a batch dim and N removed from
// w's N or from x's batch dim. Bytes only: a candidate that gathers an operand over an axis
// makes the devices of that axis repeat each other's work. MatmulPlan says what was chosen.
//
// Example:
//   DeviceMesh mesh({2, 4}, {"data", "model"});
//   matmul_output_layout(TensorLayout({"data", "model"}, mesh), TensorLayout({"model", None},
//   mesh));
//       // layout[data,None]@mesh[data=2,model=4]: partial sums over 'model', all-reduced
//   MatmulPlan plan = plan_matmul(x, w);   // x, w: Arrays
//   std::cout << plan.to_string();
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout/tensor_layout.h"

namespace meshlayout {

/// How the partial sums of a sharded contraction are completed.
enum class MatmulReduction {
  kNone,           // K is not split: each device's product is its output block
  kAllReduce,      // summed over the contracted axes; the result is replicated over them
  kReduceScatter,  // summed straight into output_layout's blocks (a reduce-scatter when
                   // output_layout splits a dimension over the contracted axes)
};

/// "none", "all-reduce" or "reduce-scatter".
std::string_view reduction_name(MatmulReduction reduction);

struct MatmulPlan;

struct MatmulOptions {
  /// Layout of the result (its mesh, if any, must be the operands'). Unset: the layout of the
  /// table above. With a split K, a layout other than that one is reached by summing the
  /// partial sums straight into it (kReduceScatter); otherwise the result is resharded.
  std::optional<TensorLayout> output_layout;
  /// When set, receives the plan matmul executed.
  MatmulPlan* plan_out = nullptr;
  /// When set, y = x @ w + add_to_output (the output's shape and dtype, any layout): a
  /// residual connection fused into the product. With a split K it is added into one partial
  /// sum per output block before the reduction, so the replicas of y get it without a pass
  /// of their own (a row-parallel projection followed by a residual add: one addition per
  /// block instead of one per replica).
  const Array* add_to_output = nullptr;
};

struct MatmulPlan {
  Shape x_shape, w_shape, output_shape;
  DType dtype = DType::kF32;
  /// The layouts the local products read x and w in (the operands' own unless resharded).
  TensorLayout x_layout = TensorLayout::replicated(0);
  TensorLayout w_layout = TensorLayout::replicated(0);
  bool reshard_x = false, reshard_w = false;
  int64_t x_reshard_bytes = 0;  // bytes the reshard of x moves between devices
  int64_t w_reshard_bytes = 0;
  /// Mesh axes K is split over (x's K and w's K alike), major first; empty: no partial sums.
  std::vector<std::string> contracted_axes;
  /// Layout of the local products (= the output of the table above).
  TensorLayout product_layout = TensorLayout::replicated(0);
  MatmulReduction reduction = MatmulReduction::kNone;
  /// kAllReduce whose reduction groups span more than 2 processes: first reduce-scatter into
  /// scatter_layout, then all-gather into output_layout (see NOTE [Partial sums]).
  bool all_reduce_in_two_steps = false;
  TensorLayout scatter_layout = TensorLayout::replicated(0);
  /// kNone only: the products are resharded to output_layout afterwards.
  bool reshard_output = false;
  int64_t output_reshard_bytes = 0;
  TensorLayout output_layout = TensorLayout::replicated(0);

  /// A few lines: shapes, operand reshards, local products, completion, result layout.
  std::string to_string() const;
};

/// The output layout of the table for operand layouts that need no reshard. The result has
/// x's mesh (or w's, if x has none). ValueError for ranks other than x >= 2 and w == 2, for
/// different meshes, and for a pair that needs a reshard (the message names the conflict;
/// plan_matmul() tells which reshard matmul would make, as that depends on the shapes).
TensorLayout matmul_output_layout(const TensorLayout& x, const TensorLayout& w);

/// What matmul(x, w, options) does, without doing it. Same errors as matmul().
MatmulPlan plan_matmul(const Array& x, const Array& w, const MatmulOptions& options = {});

/// The same from the operands' geometries (shapes and layouts on one mesh), their dtype and the
/// devices per process (process = device id / local_device_count).
MatmulPlan plan_matmul(const ShardGeometry& x, const ShardGeometry& w, DType dtype,
                       int64_t local_device_count, const MatmulOptions& options = {});

}  // namespace meshlayout
