// attention_internal.h — what attention.cc and attention_backward.cc share: attention's argument
// checks, the rotary embedding's checks and rotation (by +angle forward, −angle backward), and
// two small shard helpers. Internal to attention.cc / attention_backward.cc (implemented in
// attention.cc); not part of the ops API.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "meshlayout/array/array.h"
#include "meshlayout/ops/attention.h"

namespace meshlayout::internal_ops {

// `a` itself when it already has `layout`, else a resharded copy kept in `storage`.
const Array& in_layout(const Array& a, const TensorLayout& layout, std::optional<Array>& storage);

// Element `index` of a key_mask shard (I32, I64, U8 or BOOL) as an integer.
int64_t mask_value(const Array::Shard& s, DType dtype, int64_t index);

// The first key query row t sees under options.sliding_window (0 when there is none): keys
// s <= t + query_offset − window are masked; never past `visible`.
inline int64_t window_start(const AttentionOptions& options, int64_t t, int64_t visible) {
  if (options.sliding_window <= 0) return 0;
  const int64_t first = t + options.query_offset - options.sliding_window + 1;
  return first <= 0 ? 0 : (first < visible ? first : visible);
}

// The checks of attention's arguments, errors prefixed with `op` ("attention" or
// "attention_backward"); with `d_out` (the backward) also its dtype, shape (q's) and mesh.
void check_attention(std::string_view op, const Array& q, const Array& k, const Array& v,
                     const Array* d_out, const AttentionOptions& o);

// Which way the rotary embedding turns: by +angle (apply_rotary_embedding) or by −angle, the
// transpose (apply_rotary_embedding_backward; its errors say "rotary embedding backward").
enum class RotaryDirection { kForward, kBackward };

// x rotated per (position, frequency) pair with head_dim made whole; the checks first. With
// row_starts (one per batch row), row b at positions row_starts[b] + t, not start_position + t.
Array rotary_embedding(const Array& x, int64_t start_position, const Rope& rope,
                       RotaryDirection direction, std::span<const int64_t> row_starts = {});
// The same, rotating x's own buffers when its head_dim is already whole.
Array rotary_embedding(Array&& x, int64_t start_position, const Rope& rope,
                       RotaryDirection direction, std::span<const int64_t> row_starts = {});

}  // namespace meshlayout::internal_ops
