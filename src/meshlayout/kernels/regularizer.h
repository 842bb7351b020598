// regularizer.h — the per-shard kernels of the L1/L2 weight penalties (nn/regularizer.h):
// Σ|w| and Σw² accumulated in double, and the penalty's gradient added into a gradient shard.
//
// Example (per counted shard s of w):
//   penalty_sums(kind_of(w), {.w = &s, .dtype = w.dtype(), .sums = sums});   // sums[2]
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// sums[0] += Σ|w|, sums[1] += Σw² over the shard, element by element in order, in double.
struct PenaltySums {
  const Array::Shard* w;
  DType dtype;  // F32 or F64
  double* sums;
};

/// g[i] += l1·sign(w[i]) + 2·l2·w[i] (computed in double; sign(0) = 0, sign(NaN) = NaN).
struct PenaltyGradient {
  const Array::Shard* w;
  Array::Shard* g;
  DType dtype;
  double l1, l2;
};

void penalty_sums_cpu(const PenaltySums& args);
void penalty_gradient_cpu(const PenaltyGradient& args);

inline KernelOp<void(const PenaltySums&)> penalty_sums{"penalty_sums", &penalty_sums_cpu};
inline KernelOp<void(const PenaltyGradient&)> penalty_gradient{"penalty_gradient",
                                                               &penalty_gradient_cpu};

}  // namespace meshlayout
