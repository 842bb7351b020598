// geglu.h — the per-shard kernels of the GeGLU gate (nn/layers/core/gated_feed_forward.h): y =
// gelu(g) · u with gelu's tanh approximation (keras gelu(approximate=True), Gemma's), and its
// backward.
//
//   gelu(g) = ½·g·(1 + tanh(t)),  t = √(2/π)·(g + 0.044715·g³)
//   dg = dy · u · (½·(1 + tanh t) + ½·g·(1 − tanh² t)·√(2/π)·(1 + 3·0.044715·g²)),  du = dy·gelu(g)
// Computed in the element type (float for F32, double for F64), element by element.
//
// Example (per local shard s of y, in nn/layers/core/gated_feed_forward.cc):
//   geglu_forward(kind_of(y), {.y = &s, .g = g.shard_at(s.position), .u = u.shard_at(s.position),
//                              .dtype = y.dtype()});
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

struct GegluForward {
  Array::Shard* y;  // gelu(g) · u on return
  const Array::Shard* g;
  const Array::Shard* u;
  DType dtype;  // F32 or F64
};

struct GegluBackward {
  Array::Shard* dg;  // dL/dg on return
  Array::Shard* du;  // dL/du on return
  const Array::Shard* g;
  const Array::Shard* u;
  const Array::Shard* dy;
  DType dtype;
};

void geglu_forward_cpu(const GegluForward& args);
void geglu_backward_cpu(const GegluBackward& args);

inline KernelOp<void(const GegluForward&)> geglu_forward{"geglu_forward", &geglu_forward_cpu};
inline KernelOp<void(const GegluBackward&)> geglu_backward{"geglu_backward", &geglu_backward_cpu};

}  // namespace meshlayout
