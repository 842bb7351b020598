// elementwise.h — the per-shard kernels of ops/elementwise.h: y = y ∘ x element by element (add,
// multiply) on one box, and the concatenation of the inputs' boxes along an axis into a device's
// output box. F32 or F64 (float and double) for the arithmetic; the concatenation copies bytes.
//
// Example (ops/elementwise.cc, per local shard o of the output):
//   combine_shards(kind, {.y = &o, .x = b.shard_at(o.position), .function = Binary::kAdd,
//                         .dtype = DType::kF32});
#pragma once

#include <cstddef>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

enum class Binary { kAdd, kMultiply };

/// y[k] = y[k] + x[k] (kAdd) or y[k] · x[k] (kMultiply) over y's box; x holds the same box.
struct CombineShards {
  Array::Shard* y;
  const Array::Shard* x;
  Binary function;
  DType dtype;  // F32 or F64
};

/// dst's box = the inputs' boxes joined along `axis` in order: the inputs' boxes agree with dst's
/// off the axis and their extents on it add up to dst's. Elements of `elem` bytes.
struct ConcatenateShards {
  Array::Shard* dst;
  std::span<const Array::Shard* const> inputs;
  size_t axis;
  size_t elem;
};

void combine_shards_cpu(const CombineShards& args);
void concatenate_shards_cpu(const ConcatenateShards& args);

inline KernelOp<void(const CombineShards&)> combine_shards{"combine_shards", &combine_shards_cpu};
inline KernelOp<void(const ConcatenateShards&)> concatenate_shards{"concatenate_shards",
                                                                   &concatenate_shards_cpu};

}  // namespace meshlayout
