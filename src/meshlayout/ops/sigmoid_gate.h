// sigmoid_gate.h — a per-row sigmoid gate on distributed arrays and its backward (Qwen 2 MoE's
// shared expert: out += sigmoid(x · w_sg) ⊙ shared_mlp(x)):
//
//   y[…, :] = sigmoid(g[…, 0]) · s[…, :]        g (…, 1), s (…, n) → y (…, n)
//   ds = sigmoid(g) · dy;  dg[…, 0] = sigmoid'(g) · Σ_j dy[…, j] · s[…, j]
//
// Layouts: y is computed in s's layout, g brought to s's sharding of the leading dimensions
// (its last dimension whole); the backward gives ds in dy's layout and dg in g's, summing each
// row on the devices that hold it whole (s and dy brought to dy's layout with the last dimension
// whole when it is split). F32 and F64; each device works on its own shards (kernels/
// sigmoid_gate.h).
//
// Example:
//   Array y = sigmoid_gate(matmul(x, w_gate), shared);   // (b, t, 1) and (b, t, d) → (b, t, d)
//   SigmoidGateGrads g = sigmoid_gate_backward(gate, shared, dy);   // g.dg (b, t, 1), g.ds
#pragma once

#include "meshlayout/array/array.h"

namespace meshlayout {

/// sigmoid(g) times every row of s, in s's layout. Collective when g's leading sharding
/// differs from s's. ValueError naming both shapes and dtypes unless g is s's shape with a last
/// extent of 1 and both share an F32 or F64 dtype.
Array sigmoid_gate(const Array& g, const Array& s);

struct SigmoidGateGrads {
  Array dg;  // (…, 1), g's layout
  Array ds;  // (…, n), dy's layout
};

/// The gradients of y = sigmoid_gate(g, s) given dy (s's shape). Collective. Errors as
/// sigmoid_gate, and for dy of another shape or dtype than s.
SigmoidGateGrads sigmoid_gate_backward(const Array& g, const Array& s, const Array& dy);

}  // namespace meshlayout
