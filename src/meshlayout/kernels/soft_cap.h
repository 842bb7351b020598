// soft_cap.h — the per-shard kernels of Gemma's logit soft-capping (ops/scalar_ops.h):
// y = cap · tanh(x / cap) in place, and its backward dx = dy · (1 − (y / cap)²) from the
// capped values. F32 (computed in float) or F64.
//
// Example:
//   soft_cap_shard(kind_of(y), {.shard = &s, .dtype = DType::kF32, .cap = 30.0});
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// Every element x of the shard becomes cap · tanh(x / cap).
struct SoftCapShard {
  Array::Shard* shard;
  DType dtype;
  double cap;
};

/// Every element of dy (in place) times 1 − (y / cap)², y the capped values (same box).
struct SoftCapBackwardShard {
  Array::Shard* dy;
  const Array::Shard* y;
  DType dtype;
  double cap;
};

void soft_cap_shard_cpu(const SoftCapShard& args);
void soft_cap_backward_shard_cpu(const SoftCapBackwardShard& args);

inline KernelOp<void(const SoftCapShard&)> soft_cap_shard{"soft_cap_shard", &soft_cap_shard_cpu};
inline KernelOp<void(const SoftCapBackwardShard&)> soft_cap_backward_shard{
    "soft_cap_backward_shard", &soft_cap_backward_shard_cpu};

}  // namespace meshlayout
