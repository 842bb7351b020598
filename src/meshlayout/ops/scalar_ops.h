// scalar_ops.h — element-wise operations with a scalar on distributed arrays, each device on
// its own shards, the layout kept: scale (Gemma's embeddings times sqrt(hidden_size)) and Gemma 2's
// soft-capping of the final logits, y = cap · tanh(x / cap), with its backward.
//
// Example:
//   Array x = scale(embedding(tokens), std::sqrt(2304.0));
//   Array logits = soft_cap(matmul(h, table), 30.0);
//   Array dlogits = soft_cap_backward(logits, d_capped, 30.0);
#pragma once

#include "meshlayout/array/array.h"

namespace meshlayout {

/// x · factor (F32: each product computed in double and rounded; F64), in x's layout. The
/// rvalue form scales x's own buffers. ValueError unless x is F32 or F64.
Array scale(const Array& x, double factor);
Array scale(Array&& x, double factor);

/// cap · tanh(x / cap) element by element, in x's layout and dtype (F32 or F64). ValueError
/// naming cap unless it is positive and finite, or x's dtype otherwise.
Array soft_cap(const Array& x, double cap);

/// The backward of y = soft_cap(x, cap): dy · (1 − (y / cap)²), in dy's layout (y brought to
/// it). ValueError unless y and dy share shape and dtype (F32 or F64), or for a bad cap.
Array soft_cap_backward(const Array& y, const Array& dy, double cap);

}  // namespace meshlayout
