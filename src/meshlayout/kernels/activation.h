// activation.h — the per-shard kernels of Keras' activations (nn/layers/activations/activation.h:
// relu, exact gelu, tanh, softmax over the last dimension, silu), forward and backward, in the
// element type (float for F32, double for F64); the backward's derivatives in double.
//
// Example (per local shard s of y, in nn/layers/activations/activation.cc):
//   activation_forward(kind_of(y), {.y = &s, .function = ActivationFunction::kRelu,
//                                   .row = y.shape().back(), .dtype = y.dtype()});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// The functions the kernels compute; kLinear computes nothing.
enum class ActivationFunction { kLinear, kRelu, kGelu, kTanh, kSoftmax, kSilu };

struct ActivationForward {
  Array::Shard* y;  // holds z on entry, f(z) on return
  ActivationFunction function;
  int64_t row;  // softmax's row length (the last dimension, whole in the shard); 1 for a scalar
  DType dtype;  // F32 or F64
};

struct ActivationBackward {
  Array::Shard* g;        // holds dy on entry, dy · f'(z) on return
  const Array::Shard* z;  // the forward's input, the same box as g
  ActivationFunction function;
  int64_t row;  // as the forward's
  DType dtype;  // F32 or F64, of g and z
};

void activation_forward_cpu(const ActivationForward& args);
void activation_backward_cpu(const ActivationBackward& args);

inline KernelOp<void(const ActivationForward&)> activation_forward{"activation_forward",
                                                                   &activation_forward_cpu};
inline KernelOp<void(const ActivationBackward&)> activation_backward{"activation_backward",
                                                                     &activation_backward_cpu};

}  // namespace meshlayout
