// gated_activation.h — the per-shard kernels of the gated feed-forward's fused gate
// (ops/swiglu.h, nn/layers/core/gated_feed_forward.h): y = act(g) · u and its backward, element
// by element in the element type (float for F32, double for F64), with act
//   kSilu (SwiGLU):      silu(g) = g · σ(g),  σ(g) = 1 / (1 + exp(−g))
//                        dg = dy · u · (σ + silu · (1 − σ)),  du = dy · silu(g)
//   kGeluTanh (GeGLU):   gelu(g) = ½·g·(1 + tanh(t)),  t = √(2/π)·(g + 0.044715·g³)
//                        dg = dy · u · (½·(1 + tanh t) + ½·g·(1 − tanh² t)·√(2/π)·(1 +
//                        3·0.044715·g²)), du = dy · gelu(g)
//
// Example (per local shard s of y, in ops/swiglu.cc):
//   gated_forward(kind_of(y), {.y = &s, .g = g.shard_at(s.position), .u = u.shard_at(s.position),
//                              .function = GateFunction::kSilu, .dtype = y.dtype()});
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

enum class GateFunction { kSilu, kGeluTanh };

struct GatedForward {
  Array::Shard* y;  // act(g) · u on return
  const Array::Shard* g;
  const Array::Shard* u;
  GateFunction function;
  DType dtype;  // F32 or F64
};

struct GatedBackward {
  Array::Shard* dg;  // dL/dg on return
  Array::Shard* du;  // dL/du on return
  const Array::Shard* g;
  const Array::Shard* u;
  const Array::Shard* dy;
  GateFunction function;
  DType dtype;
};

void gated_forward_cpu(const GatedForward& args);
void gated_backward_cpu(const GatedBackward& args);

inline KernelOp<void(const GatedForward&)> gated_forward{"gated_forward", &gated_forward_cpu};
inline KernelOp<void(const GatedBackward&)> gated_backward{"gated_backward", &gated_backward_cpu};

}  // namespace meshlayout
