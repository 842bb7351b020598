// conv_geometry.h — output extents and padding of a strided 2-D convolution window, as Keras
// (TF) computes them; Conv2D and SeparableConv2D share them.
//
// Example:
//   conv_out_extent(7, /*kernel=*/3, /*stride=*/2, /*same=*/true) == 4;
//   conv_pad_before(7, 3, 2, true) == 1;   // total padding 2, the smaller half before
#pragma once

#include <algorithm>
#include <cstdint>

namespace meshlayout {

/// Output extent of a window of `kernel` moved by `stride` over `in` positions: ceil(in /
/// stride) with "same" padding, else the windows that fit whole (0 when none does).
constexpr int64_t conv_out_extent(int64_t in, int64_t kernel, int64_t stride, bool same) {
  if (same) return (in + stride - 1) / stride;
  return in >= kernel ? (in - kernel) / stride + 1 : 0;
}

/// Padding before the first position: 0 for "valid"; for "same" the smaller half of
/// max((out - 1) * stride + kernel - in, 0).
constexpr int64_t conv_pad_before(int64_t in, int64_t kernel, int64_t stride, bool same) {
  if (!same) return 0;
  return std::max<int64_t>((conv_out_extent(in, kernel, stride, true) - 1) * stride + kernel - in,
                           0) /
         2;
}

}  // namespace meshlayout
