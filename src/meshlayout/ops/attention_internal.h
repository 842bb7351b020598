// attention_internal.h — what attention.cc and attention_backward.cc share: attention's argument
// checks, the rotary embedding's checks and rotation (by +angle forward, −angle backward), the
// masking the kernels read, and in_layout. Internal to attention.cc / attention_backward.cc
// (implemented in attention.cc); not part of the ops API.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/attention.h"
#include "meshlayout/ops/attention.h"

namespace meshlayout::internal_ops {

// `a` itself when it already has `layout`, else a resharded copy kept in `storage`.
const Array& in_layout(const Array& a, const TensorLayout& layout, std::optional<Array>& storage);

// The masking the kernels read (kernels/attention.h) of `options`.
AttentionMasking masking_of(const AttentionOptions& options);

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
