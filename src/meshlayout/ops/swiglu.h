// swiglu.h — the SwiGLU gate of a Llama feed-forward block, fused: silu(g) · u and its backward,
// element by element on distributed arrays (no communication when g and u share a layout).
//
//   forward   y  = silu(g) · u,                 silu(g) = g · σ(g)
//   backward  dg = dy · u · σ(g) · (1 + g · (1 − σ(g))),   du = dy · silu(g)
// σ is computed in float for F32 (as the forward SiLU of nn's activations) and in double for
// F64. Outputs are in g's layout; u and dy are brought to it first when they differ.
// gated_unit is the same for either gate function of kernels/gated_activation.h (SwiGLU, or
// GeGLU with gelu's tanh approximation), which GatedFeedForward runs.
//
// Example:
//   Array zg = matmul(m, gate_kernel), zu = matmul(m, up_kernel);
//   Array ff = swiglu(zg, zu);                       // = multiply(silu(zg), zu)
//   SwigluGrads g = swiglu_backward(zg, zu, d_ff);   // g.dg, g.du: gradients of zg and zu
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/gated_activation.h"

namespace meshlayout {

/// silu(g) · u in g's layout. Collective (u reshards if its layout differs).
/// \error ValueError naming the shapes and dtypes unless g and u have one shape and dtype, F32 or
/// F64.
Array swiglu(const Array& g, const Array& u);

struct SwigluGrads {
  Array dg;  // d loss / d g, g's layout
  Array du;  // d loss / d u, g's layout
};

/// Both gradients of swiglu(g, u) given dy = d loss / d y. Collective. Errors as swiglu, dy too.
SwigluGrads swiglu_backward(const Array& g, const Array& u, const Array& dy);

/// act(g) · u in g's layout, act = silu (kSilu: swiglu) or gelu's tanh approximation
/// (kGeluTanh: "geglu" in messages). Collective and errors as swiglu.
Array gated_unit(GateFunction function, const Array& g, const Array& u);
/// Both gradients of gated_unit(function, g, u) given dy. Collective. Errors as swiglu, dy too.
SwigluGrads gated_unit_backward(GateFunction function, const Array& g, const Array& u,
                                const Array& dy);

}  // namespace meshlayout
