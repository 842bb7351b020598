// attention.h — the per-(batch row, head) kernels of ops/attention.h and ops/attention_backward.h,
// the forward of a whole shard's (batch row, head) tasks at once (attention_shard_forward: what
// device kinds run, one launch for all heads), and the rotary embedding's per-shard rotation.
// On the CPU: scores, softmax and sums in the operands' element type (float for F32, double for
// F64) with the BLAS; under a causal mask the query rows run in blocks that skip the masked keys.
// Shards are (batch, seq, heads, head_dim) boxes with seq and head_dim whole; a key mask shard is
// (batch, keys) of I32, I64, U8 or BOOL.
//
// Example (ops/attention.cc, one task per (output shard, batch row, head), on the pool):
//   attention_head_forward(kind, {.out = &os, .q = qs, .k = ks, .v = vs, .b = 0, .h = 1,
//                                 .T = 128, .S = 128, .L = 128, .r = 2, .D = 64, .scale = 0.125,
//                                 .masking = {.causal = true}, .dtype = DType::kF32});
#pragma once

#include <cstdint>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/array/host_tensor.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// What the kernels read of ops/attention.h's AttentionOptions: query t (at position
/// t + query_offset) sees keys s <= t + query_offset when causal, and not s <= t + query_offset −
/// sliding_window when sliding_window > 0; logit_soft_cap > 0 soft-caps the scaled scores.
struct AttentionMasking {
  bool causal = true;
  int64_t query_offset = 0;
  int64_t sliding_window = 0;
  double logit_soft_cap = 0.0;
};

/// The first key query row t sees under the sliding window (0 when there is none): keys
/// s <= t + query_offset − window are masked; never past `visible`.
inline int64_t attention_window_start(const AttentionMasking& m, int64_t t, int64_t visible) {
  if (m.sliding_window <= 0) return 0;
  const int64_t first = t + m.query_offset - m.sliding_window + 1;
  return first <= 0 ? 0 : (first < visible ? first : visible);
}

/// out[b, :, h, :] = softmax(q[b, :, h] · k[b, :, j]ᵀ · scale + mask) · v[b, :, j], j the key/value
/// head of query head h (out's local head h, global out.offset[2] + h, over r), keys [0, L).
/// b and h are local to out's box; q holds out's box, k and v the key/value heads of it.
struct AttentionHeadForward {
  Array::Shard* out;
  const Array::Shard* q;
  const Array::Shard* k;
  const Array::Shard* v;
  const Array::Shard* key_mask;  // null: none
  DType mask_dtype;
  int64_t b, h;
  int64_t T, S, L, r, D;
  double scale;
  AttentionMasking masking;
  DType dtype;  // F32 or F64
};

/// Every (batch row, head) task of one output shard at once: out[b, :, h, :] for each local batch
/// row b < out.box.shape[0] and local head h < out.box.shape[2], each exactly as
/// AttentionHeadForward with these fields and that (b, h) (attention_head_task). The CPU
/// implementation runs attention_head_forward_cpu task by task, in (b, h) order; a device kind
/// runs the whole shard in one or a few launches (ops/attention.cc calls it for non-CPU kinds).
struct AttentionShardForward {
  Array::Shard* out;
  const Array::Shard* q;
  const Array::Shard* k;
  const Array::Shard* v;
  const Array::Shard* key_mask;  // null: none
  DType mask_dtype;
  int64_t T, S, L, r, D;
  double scale;
  AttentionMasking masking;
  DType dtype;  // F32 or F64
};

/// The per-head arguments of task (b, h) of a shard's forward.
inline AttentionHeadForward attention_head_task(const AttentionShardForward& a, int64_t b,
                                                int64_t h) {
  return {.out = a.out,
          .q = a.q,
          .k = a.k,
          .v = a.v,
          .key_mask = a.key_mask,
          .mask_dtype = a.mask_dtype,
          .b = b,
          .h = h,
          .T = a.T,
          .S = a.S,
          .L = a.L,
          .r = a.r,
          .D = a.D,
          .scale = a.scale,
          .masking = a.masking,
          .dtype = a.dtype};
}

/// The gradients of key/value head j (global) of batch row b (local to the boxes) into dk and dv
/// (kv boxes: kv_layout shards or partial sums over the head axes), and dq of the query heads of
/// j's group that dq's box holds. q, d_out: dq's box; k, v: the forward's key/value shards.
struct AttentionHeadBackward {
  Array::Shard* dq;
  Array::Shard* dk;
  Array::Shard* dv;
  const Array::Shard* q;
  const Array::Shard* d_out;
  const Array::Shard* k;
  const Array::Shard* v;
  const Array::Shard* key_mask;  // null: none
  DType mask_dtype;
  int64_t b, j;
  int64_t T, S, D, L, r;
  double scale;
  AttentionMasking masking;
  DType dtype;
};

/// y's box rotated in place, rotate-half: (x1·cos − x2·sin, x2·cos + x1·sin) over the two halves
/// of head_dim, with the cos and sin tables (host, y's dtype, `tables` × positions × D/2: one
/// table per distinct start, row t of a table at sequence index first + t) of batch row b's table
/// table_of_row[b] (row b local to y's box; empty: table 0). The backward passes negated sines.
struct RotateHalf {
  Array::Shard* y;
  const HostTensor* cos;
  const HostTensor* sin;
  std::span<const size_t> table_of_row;
  int64_t first;
  DType dtype;
};

void attention_head_forward_cpu(const AttentionHeadForward& args);
void attention_shard_forward_cpu(const AttentionShardForward& args);
void attention_head_backward_cpu(const AttentionHeadBackward& args);
void rotate_half_cpu(const RotateHalf& args);

inline KernelOp<void(const AttentionHeadForward&)> attention_head_forward{
    "attention_head_forward", &attention_head_forward_cpu};
inline KernelOp<void(const AttentionShardForward&)> attention_shard_forward{
    "attention_shard_forward", &attention_shard_forward_cpu};
inline KernelOp<void(const AttentionHeadBackward&)> attention_head_backward{
    "attention_head_backward", &attention_head_backward_cpu};
inline KernelOp<void(const RotateHalf&)> rotate_half{"rotate_half", &rotate_half_cpu};

}  // namespace meshlayout
