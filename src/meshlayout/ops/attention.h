// attention.h — scaled dot-product attention on distributed arrays, with grouped-query heads,
// causal and key-padding masks and a key/value cache's valid length; and the rotary position
// embedding (Hugging Face / keras-hub "rotate half" convention).
//
// Layouts: q (B, T, Hq, D) and k, v (B, S, Hkv, D), Hq a multiple of Hkv (key/value head j
// serves query heads j·r … j·r+r−1, r = Hq / Hkv, as keras.ops.repeat and HF repeat_kv). Each
// device computes the (batch, head) pairs of its q box, so the sequence and head dimensions
// must be whole on a device: q keeps its batch and head splits and gathers T and D if they are
// split; k and v follow q's batch split, and q's head split when the key/value heads it needs
// are exactly the device's own block (Hkv split evenly like Hq), otherwise they are replicated
// over the head axes (2 KV heads on a 4-way axis: every device holds both and uses its own) —
// see attention_kv_layout, which the plan reports. The output has q's layout: no communication
// beyond those reshards. Scores, softmax and sums run in the inputs' dtype (F32 in float, F64 in
// double: one templated code path) with BLAS per (batch, head), the softmax with its maximum
// subtracted; masked keys get weight 0 and a query row with no
// key left gives zeros (as Keras' Softmax with a mask).
//
// Example:
//   Array o = attention(q, k, v, {.causal = true});             // prefill
//   Array o1 = attention(q1, k_cache, v_cache,                   // decode step at position p
//                        {.causal = true, .query_offset = p, .key_length = p + 1});
//   Array q_rot = apply_rotary_embedding(q, /*start_position=*/p, /*theta=*/10000.0);
//   Array q_rows = apply_rotary_embedding(q, std::vector<int64_t>{-2, 0}, 10000.0);  // per row
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/rope.h"

namespace meshlayout {

struct AttentionOptions {
  /// Query t (at position t + query_offset) sees keys s <= t + query_offset (keras-hub's
  /// compute_causal_mask with a cache index).
  bool causal = true;
  int64_t query_offset = 0;
  /// Keys [0, key_length) are used (a cache filled so far); -1: all S.
  int64_t key_length = -1;
  /// Optional (B, S) mask of the keys to attend (non-zero) — padding; I32, I64, U8 or BOOL.
  const Array* key_mask = nullptr;
  /// Scores are scaled by this; 0: 1 / sqrt(D).
  double scale = 0.0;
  /// > 0: sliding-window attention (Mistral, Gemma's local layers; Hugging Face's
  /// sliding_window): query t also masks keys s <= t + query_offset − sliding_window, so it sees
  /// at most sliding_window keys, itself included. 0: no window.
  int64_t sliding_window = 0;
  /// > 0: Gemma 2's attention logit soft-capping, each scaled score z becomes
  /// cap · tanh(z / cap) before the softmax (Hugging Face's attn_logit_softcapping). 0: none.
  double logit_soft_cap = 0.0;
};

/// softmax(q · kᵀ · scale + mask) · v per batch and query head. F32 or F64 (q, k, v of one
/// dtype; the output has it). Collective.
/// \error ValueError naming the shapes if ranks, batch, head_dim or S differ, Hq is not a
///   multiple of Hkv, key_length is outside [0, S]; naming the dtypes unless q, k and v are all
///   F32 or all F64 (no implicit cast).
Array attention(const Array& q, const Array& k, const Array& v,
                const AttentionOptions& options = {});

/// The layout attention gives k and v for a q laid out as `q_layout` (its batch axes, and its
/// head axes only when every device's query-head block maps onto exactly one key/value-head
/// block); `heads_replicated` tells which case it is.
TensorLayout attention_kv_layout(const TensorLayout& q_layout, int64_t query_heads,
                                 int64_t kv_heads, bool* heads_replicated = nullptr);

/// x (B, T, H, D) rotated at positions start_position + t: the first and second halves of D are
/// (x1·cos − x2·sin, x2·cos + x1·sin) with angle (position) · rope's frequency i, i < D/2 (angles
/// and their cos/sin in double, the rotation in x's dtype: F32 or F64). Keeps x's layout (D
/// gathered first if split). ValueError if D is odd or x is neither F32 nor F64.
Array apply_rotary_embedding(const Array& x, int64_t start_position, const Rope& rope);
/// The same, in x's own buffers when head_dim is whole on every device (no copy). `x` must own
/// its buffers, not borrow another array's shards (array_view.h).
Array apply_rotary_embedding(Array&& x, int64_t start_position, const Rope& rope);
/// The same with one start position per batch row: row b is rotated at positions
/// row_starts[b] + t (left-padded batches, models/generation.h: each row's first real token at
/// position 0, so a start may be negative: the padding slots before it, masked anyway).
/// ValueError unless row_starts has one entry per batch row.
Array apply_rotary_embedding(const Array& x, std::span<const int64_t> row_starts, const Rope& rope);
Array apply_rotary_embedding(Array&& x, std::span<const int64_t> row_starts, const Rope& rope);

}  // namespace meshlayout
