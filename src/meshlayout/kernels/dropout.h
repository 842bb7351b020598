// dropout.h — the per-shard kernel of keras.layers.Dropout (nn/layers/regularization/dropout.h):
// each element of the global tensor keeps (scaled by 1 / (1 − rate)) or drops by its own Philox
// word, keyed by the seed and the step, so a mask does not depend on the layout or the process
// count.
//
// Example (per local shard s of y):
//   dropout_mask(kind_of(y), {.y = &s, .shape = &y.shape(), .dtype = y.dtype(), .rate = 0.5,
//                             .key = seed, .counter_high = step});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

struct DropoutMask {
  Array::Shard* y;     // holds x on entry, the masked and scaled x on return
  const Shape* shape;  // the global shape
  DType dtype;         // F32 or F64
  double rate;
  uint64_t key;           // the seed
  uint64_t counter_high;  // the step
};

void dropout_mask_cpu(const DropoutMask& args);

inline KernelOp<void(const DropoutMask&)> dropout_mask{"dropout_mask", &dropout_mask_cpu};

}  // namespace meshlayout
