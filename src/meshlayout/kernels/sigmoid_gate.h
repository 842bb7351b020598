// sigmoid_gate.h — the per-shard kernels of a per-row sigmoid gate (ops/sigmoid_gate.h, Qwen 2
// MoE's shared expert): y[r, :] = sigmoid(g[r]) · s[r, :] in place on a copy of s, and the
// gate's gradient dg[r] = sigmoid'(g[r]) · Σ_j dy[r, j] · s[r, j] in place on a copy of g. A
// shard's rows are its box's elements divided by its last extent; g's shard holds the same rows
// (its last extent 1). F32 (computed in float) or F64.
//
// Example:
//   sigmoid_gate_shard(kind_of(y), {.y = &ys, .g = &gs, .dtype = DType::kF32});
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// Every row of y (in place) times sigmoid of the row's gate value in g.
struct SigmoidGateShard {
  Array::Shard* y;
  const Array::Shard* g;
  DType dtype;
};

/// Every gate value of g (in place) becomes sigmoid'(g) · Σ_j dy[r, j] · s[r, j]; s and dy
/// share a box whose last extent is the whole row.
struct SigmoidGateBackwardShard {
  Array::Shard* g;
  const Array::Shard* s;
  const Array::Shard* dy;
  DType dtype;
};

void sigmoid_gate_shard_cpu(const SigmoidGateShard& args);
void sigmoid_gate_backward_shard_cpu(const SigmoidGateBackwardShard& args);

inline KernelOp<void(const SigmoidGateShard&)> sigmoid_gate_shard{"sigmoid_gate_shard",
                                                                  &sigmoid_gate_shard_cpu};
inline KernelOp<void(const SigmoidGateBackwardShard&)> sigmoid_gate_backward_shard{
    "sigmoid_gate_backward_shard", &sigmoid_gate_backward_shard_cpu};

}  // namespace meshlayout
