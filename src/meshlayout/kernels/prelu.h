// prelu.h — the per-shard kernels of keras.layers.PReLU (nn/layers/activations/prelu.h): y = x for
// x >= 0, α·x otherwise; α indexed through per-dimension strides (0 on the batch and the shared
// axes).
//
// Example (per local shard s of y, in nn/layers/activations/prelu.cc):
//   prelu_forward(kind_of(y), {.y = &s, .alpha = alpha.shard_at(s.position),
//                              .alpha_strides = strides, .dtype = y.dtype()});
#pragma once

#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/array/host_tensor.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

struct PreluForward {
  Array::Shard* y;                         // holds x on entry, PReLU(x) on return
  const Array::Shard* alpha;               // α whole (replicated) on the shard's device
  std::span<const int64_t> alpha_strides;  // per input dimension
  DType dtype;                             // F32 or F64
};

struct PreluBackward {
  Array::Shard* dx;  // holds dy on entry, dL/dx on return
  Array::Shard* g;   // null, or holds dy on entry and dy · min(x, 0) on return
  const Array::Shard* x;
  const Array::Shard* alpha;
  std::span<const int64_t> alpha_strides;
  DType dtype;
};

/// α's gradient from `summed` (dy · min(x, 0) summed over the batch, one whole sample):
/// summed over the shared axes into `alpha_grad` (α's shape), accumulated in double.
struct PreluAlphaGradient {
  const Array::Shard* summed;
  Shape sample;                            // the input's shape without the batch axis
  std::span<const int64_t> alpha_strides;  // per sample dimension
  HostTensor* alpha_grad;
};

void prelu_forward_cpu(const PreluForward& args);
void prelu_backward_cpu(const PreluBackward& args);
void prelu_alpha_gradient_cpu(const PreluAlphaGradient& args);

inline KernelOp<void(const PreluForward&)> prelu_forward{"prelu_forward", &prelu_forward_cpu};
inline KernelOp<void(const PreluBackward&)> prelu_backward{"prelu_backward", &prelu_backward_cpu};
inline KernelOp<void(const PreluAlphaGradient&)> prelu_alpha_gradient{"prelu_alpha_gradient",
                                                                      &prelu_alpha_gradient_cpu};

}  // namespace meshlayout
