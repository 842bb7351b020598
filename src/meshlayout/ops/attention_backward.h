// attention_backward.h — the backward of attention (attention.h) and of the rotary position
// embedding, on distributed arrays, in the layouts of the forward.
//
// attention_backward recomputes the softmax from q and k (the forward's probabilities are not
// kept) and, per batch row and query head, with BLAS in the inputs' dtype, F32 or F64
// (S = scale·q·kᵀ masked,
// P = softmax(S), out = P·v):
//   dP = d_out·vᵀ,  dS = scale · P ⊙ (dP − rowsum(P ⊙ dP)),
//   dq = dS·k,  dk = Σ_group dSᵀ·q,  dv = Σ_group Pᵀ·d_out,
// the sums running over the r = Hq / Hkv query heads a key/value head serves (grouped-query
// attention). Masked keys and rows with no visible key give zero gradient.
//
// Sharding follows the forward: each device computes the (batch, head) pairs of its q box
// (q and d_out with T and D whole, k and v in attention_kv_layout). When a device's query heads
// are exactly the query groups of its own key/value-head block (or the heads are not split),
// its dk and dv blocks are complete. When the key/value heads do not split like the query heads
// (2 KV heads on a 4-way axis: the forward replicates them over the head axes), each device's
// dk and dv are the share of its own query heads: partial sums over the head axes, completed by
// one reduction straight into k's and v's layouts (partial_sum.h; nothing is gathered whole).
// dq comes back in q's layout, dk in k's, dv in v's.
//
// apply_rotary_embedding_backward rotates by −angle: the rotation is orthogonal, so its
// transpose is its inverse.
//
// Example:
//   Array o = attention(q, k, v, {.causal = true});
//   Array d_out = …;                                          // dL/d(o), o's shape
//   AttentionGrads g = attention_backward(q, k, v, d_out, {.causal = true});
//   Array dq_pre = apply_rotary_embedding_backward(g.dq, /*start_position=*/0, 10000.0);
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/ops/attention.h"

namespace meshlayout {

struct AttentionGrads {
  Array dq;  // q's shape and layout
  Array dk;  // k's shape and layout
  Array dv;  // v's shape and layout
};

/// The gradients of attention(q, k, v, options) given d_out = dL/d(out). F32 or F64: q, k, v
/// and d_out of one dtype, the gradients in it. Collective.
/// \error ValueError naming the shapes as attention does, and if d_out's shape or dtype is not
///   q's or it is on another mesh.
AttentionGrads attention_backward(const Array& q, const Array& k, const Array& v,
                                  const Array& d_out, const AttentionOptions& options = {});

/// dL/dx of y = apply_rotary_embedding(x, start_position, theta) given dy = dL/dy: dy rotated
/// by −angle. Keeps dy's layout (D gathered first if split). ValueError as the forward's.
Array apply_rotary_embedding_backward(const Array& dy, int64_t start_position, const Rope& rope);
/// The same, in dy's own buffers when head_dim is whole on every device (no copy). `dy` must
/// own its buffers, not borrow another array's shards (array_view.h).
Array apply_rotary_embedding_backward(Array&& dy, int64_t start_position, const Rope& rope);

}  // namespace meshlayout
