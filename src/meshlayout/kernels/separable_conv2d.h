// separable_conv2d.h — the per-shard kernels of the depthwise step of
// keras.layers.SeparableConv2D (nn/layers/convolutional/separable_conv2d.h): each input channel c
// convolved with M filters of its own (output channel c·M + m), accumulated in double; and its
// backward (dx and each image's share of the depthwise kernel's gradient). The pointwise step is a
// matmul, the bias kernels/bias.h's.
//
// Example (per local shard s of d, in nn/layers/convolutional/separable_conv2d.cc):
//   depthwise_conv2d_forward(kind, {.y = &s, .x = in.shard_at(s.position),
//                                   .kernel = dk.shard_at(s.position), .g = g, .dtype = dtype});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// One image's geometry: input H × W × C, M filters per channel, window kh × kw moved by
/// (sh, sw), output OH × OW, padding `top` and `left` before the first row and column.
struct DepthwiseConv2DGeometry {
  int64_t H, W, C, M, kh, kw, sh, sw, OH, OW, top, left;
};

/// y (images, OH, OW, C·M) = the depthwise convolution of x (images, H, W, C) with the kernel
/// (kh, kw, C, M, whole).
struct DepthwiseConv2DForward {
  Array::Shard* y;
  const Array::Shard* x;
  const Array::Shard* kernel;
  DepthwiseConv2DGeometry g;
  DType dtype;  // F32 or F64
};

/// dx (images, H, W, C) from dy (images, OH, OW, C·M); with `kernel_partials` (images, kh, kw,
/// C, M) also each image's share of the kernel's gradient.
struct DepthwiseConv2DBackward {
  Array::Shard* dx;
  Array::Shard* kernel_partials;  // null when the kernel is not trained
  const Array::Shard* x;
  const Array::Shard* dy;
  const Array::Shard* kernel;
  DepthwiseConv2DGeometry g;
  DType dtype;
};

void depthwise_conv2d_forward_cpu(const DepthwiseConv2DForward& args);
void depthwise_conv2d_backward_cpu(const DepthwiseConv2DBackward& args);

inline KernelOp<void(const DepthwiseConv2DForward&)> depthwise_conv2d_forward{
    "depthwise_conv2d_forward", &depthwise_conv2d_forward_cpu};
inline KernelOp<void(const DepthwiseConv2DBackward&)> depthwise_conv2d_backward{
    "depthwise_conv2d_backward", &depthwise_conv2d_backward_cpu};

}  // namespace meshlayout
