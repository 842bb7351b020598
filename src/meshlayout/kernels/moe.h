// moe.h — the per-shard kernels of a mixture of experts (ops/moe.h, nn/layers/moe/): the router's
// top-k choice and its backward, one device's block of experts applied to its rows of tokens
// and that block's backward, and the row moves and sums of the all-to-all token dispatcher. F32 or
// F64 (float and double); the products run the BLAS.
//
// Rows: a shard's box over the leading dimensions of a (…, X) tensor is `rows` rows of X
// contiguous elements (the last dimension unsplit). Every shard passed together covers the same
// rows (the same leading box).
//
// Routing (Hugging Face's Mixtral / Qwen-MoE router): p = softmax(logits) over the E experts of
// each row, in the element type; the k largest p (ties: the lower expert index first, as
// torch.topk), in descending order; their weights are those p, divided by their sum when
// `normalize` (Mixtral always, Qwen by norm_topk_prob).
//
// Expert block: a device holds experts [first_expert, first_expert + experts) of the stacked
// kernels gate and up (E, d, F) and down (E, F, d), and a block of F columns (f of them) of
// each. For every row r and slot j whose expert e lies in the block:
//   out[r] += w[r, j] · (act(x[r] · gate_e) ⊙ (x[r] · up_e)) · down_e
// summed over e in ascending expert order; rows with no expert in the block get zeros. The
// complete output is the sum of the blocks' outputs (ops/moe.cc's partial sums).
//
// Example (ops/moe.cc, per local partial of a device):
//   moe_experts_forward(kind, {.x = xs, .ids = ids, .weights = w, .gate = g, .up = u, .down = dn,
//                              .out = &partial, .rows = rows, .d = d, .top_k = 2,
//                              .first_expert = 4, .experts = 4, .f = F,
//                              .function = GateFunction::kSilu, .dtype = DType::kF32});
#pragma once

#include <cstdint>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/gated_activation.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// The router's choice for `rows` rows of logits (rows × experts).
struct MoeRoute {
  const Array::Shard* logits;  // rows × experts
  Array::Shard* ids;           // rows × top_k, I32: the chosen experts, by descending p
  Array::Shard* weights;       // rows × top_k: their weights
  Array::Shard* probs;         // rows × experts: p (the backward's and the auxiliary loss's input)
  int64_t rows, experts, top_k;
  bool normalize;
  DType dtype;  // of logits, weights and probs: F32 or F64
};

/// dL/dlogits (rows × experts) given p, the choice and dL/dweights (rows × top_k), plus, when
/// `probs_grad` is set, a term added to dL/dp of every row: dL/dp[r, e] += probs_grad[e] (the
/// auxiliary load-balancing loss, linear in p given the choice).
struct MoeRouteBackward {
  Array::Shard* dlogits;
  const Array::Shard* probs;
  const Array::Shard* ids;
  const Array::Shard* dweights;
  const double* probs_grad;  // experts values, or null
  int64_t rows, experts, top_k;
  bool normalize;
  DType dtype;
};

/// The auxiliary loss's statistics of `rows` rows: counts[e] += how many times expert e was
/// chosen, prob_sums[e] += Σ_r p[r, e] (in double).
struct MoeCount {
  const Array::Shard* ids;    // rows × top_k, I32
  const Array::Shard* probs;  // rows × experts
  int64_t rows, top_k, experts;
  double* counts;     // experts values, added to
  double* prob_sums;  // experts values, added to
  DType dtype;        // of probs
};

/// One device's expert block applied to its rows (see the file comment). `out` (rows × d) is
/// written.
struct MoeExpertsForward {
  const Array::Shard* x;        // rows × d
  const Array::Shard* ids;      // rows × top_k, I32
  const Array::Shard* weights;  // rows × top_k
  const Array::Shard* gate;     // experts × d × f
  const Array::Shard* up;       // experts × d × f
  const Array::Shard* down;     // experts × f × d
  Array::Shard* out;            // rows × d
  int64_t rows, d, top_k;
  int64_t first_expert, experts, f;
  GateFunction function;
  DType dtype;
};

/// The block's backward given dy (rows × d): writes the block's share of dx (rows × d) and of
/// dL/dweights (rows × top_k: dy[r] · (that expert's output before its weight), zero for slots
/// whose expert is not in the block), and the block's complete kernel gradients over these rows
/// (dgate, dup: experts × d × f; ddown: experts × f × d). Null dx or dweights: not wanted.
struct MoeExpertsBackward {
  const Array::Shard* x;
  const Array::Shard* ids;
  const Array::Shard* weights;
  const Array::Shard* gate;
  const Array::Shard* up;
  const Array::Shard* down;
  const Array::Shard* dy;  // rows × d
  Array::Shard* dx;        // rows × d, or null
  Array::Shard* dweights;  // rows × top_k, or null
  Array::Shard* dgate;     // experts × d × f
  Array::Shard* dup;       // experts × d × f
  Array::Shard* ddown;     // experts × f × d
  int64_t rows, d, top_k;
  int64_t first_expert, experts, f;
  GateFunction function;
  DType dtype;
};

/// Moves whole rows between host buffers of one process (the all-to-all token dispatcher of
/// ops/moe.cc: a device's routed rows into a compact buffer, a message's rows out of staging):
/// dst row dst_rows[i] = src row src_rows[i] for i < count, rows of `row_bytes` bytes. src and
/// dst may be shards of different local devices or staging buffers, never overlapping.
struct MoeCopyRows {
  const Array::Shard* src;
  const int64_t* src_rows;
  Array::Shard* dst;
  const int64_t* dst_rows;
  int64_t count;
  size_t row_bytes;
};

/// The rows of an ids shard (rows × top_k, I32) routed to at least one expert of
/// [first_expert, first_expert + experts), ascending, into `out` (host memory; replaced).
struct MoeRoutedRows {
  const Array::Shard* ids;
  int64_t rows, top_k, first_expert, experts;
  std::vector<int64_t>* out;
};

/// The combine's sums: dst row dst_rows[i] += src row src_rows[i] for i = 0, 1, … in order
/// (rows of `width` elements, F32 or F64).
struct MoeAddRows {
  const Array::Shard* src;
  const int64_t* src_rows;
  Array::Shard* dst;
  const int64_t* dst_rows;
  int64_t count, width;
  DType dtype;
};

void moe_route_cpu(const MoeRoute& args);
void moe_route_backward_cpu(const MoeRouteBackward& args);
void moe_count_cpu(const MoeCount& args);
void moe_experts_forward_cpu(const MoeExpertsForward& args);
void moe_experts_backward_cpu(const MoeExpertsBackward& args);
void moe_copy_rows_cpu(const MoeCopyRows& args);
void moe_add_rows_cpu(const MoeAddRows& args);
void moe_routed_rows_cpu(const MoeRoutedRows& args);

inline KernelOp<void(const MoeRoute&)> moe_route{"moe_route", &moe_route_cpu};
inline KernelOp<void(const MoeRouteBackward&)> moe_route_backward{"moe_route_backward",
                                                                  &moe_route_backward_cpu};
inline KernelOp<void(const MoeCount&)> moe_count{"moe_count", &moe_count_cpu};
inline KernelOp<void(const MoeExpertsForward&)> moe_experts_forward{"moe_experts_forward",
                                                                    &moe_experts_forward_cpu};
inline KernelOp<void(const MoeExpertsBackward&)> moe_experts_backward{"moe_experts_backward",
                                                                      &moe_experts_backward_cpu};
inline KernelOp<void(const MoeCopyRows&)> moe_copy_rows{"moe_copy_rows", &moe_copy_rows_cpu};
inline KernelOp<void(const MoeAddRows&)> moe_add_rows{"moe_add_rows", &moe_add_rows_cpu};
inline KernelOp<void(const MoeRoutedRows&)> moe_routed_rows{"moe_routed_rows",
                                                            &moe_routed_rows_cpu};

}  // namespace meshlayout
