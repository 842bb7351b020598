// conv2d.h — the per-shard kernels of keras.layers.Conv2D (nn/layers/convolutional/conv2d.h), NHWC
// images through im2col: a patch row per output position (the kernel's (i, j, c) row-major order,
// zeros where it reads padding) times the kernel as a (patch, filters) matrix; the backward's
// unfold (im2col into a shard) and fold (col2im, its adjoint). The bias is kernels/bias.h's.
//
// Example (per local shard s of y, in nn/layers/convolutional/conv2d.cc):
//   conv2d_forward(kind, {.y = &s, .x = in.shard_at(s.position), .kernel = k.shard_at(s.position),
//                         .g = g, .dtype = dtype});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// One image's geometry: input H × W × C, window kh × kw moved by (sh, sw), output OH × OW,
/// padding `top` and `left` before the first row and column.
struct Conv2DGeometry {
  int64_t H, W, C, kh, kw, sh, sw, OH, OW, top, left;
  int64_t patch() const { return kh * kw * C; }
};

/// y (images, OH, OW, the shard's filters) = im2col(x) · kernel, image by image.
struct Conv2DForward {
  Array::Shard* y;
  const Array::Shard* x;       // (images, H, W, C), the images of y's shard
  const Array::Shard* kernel;  // (kh, kw, C, y's filters)
  Conv2DGeometry g;
  DType dtype;  // F32 or F64
};

/// columns (images, OH, OW, patch) = im2col of each image of x.
struct Conv2DUnfold {
  Array::Shard* columns;
  const Array::Shard* x;  // (images, H, W, C)
  Conv2DGeometry g;
  DType dtype;
};

/// dx (images, H, W, C) = col2im of columns: zeroed, then each patch element added to the
/// image element it was read from (padding reads dropped).
struct Conv2DFold {
  Array::Shard* dx;
  const Array::Shard* columns;  // (images, OH, OW, patch)
  Conv2DGeometry g;
  DType dtype;
};

void conv2d_forward_cpu(const Conv2DForward& args);
void conv2d_unfold_cpu(const Conv2DUnfold& args);
void conv2d_fold_cpu(const Conv2DFold& args);

inline KernelOp<void(const Conv2DForward&)> conv2d_forward{"conv2d_forward", &conv2d_forward_cpu};
inline KernelOp<void(const Conv2DUnfold&)> conv2d_unfold{"conv2d_unfold", &conv2d_unfold_cpu};
inline KernelOp<void(const Conv2DFold&)> conv2d_fold{"conv2d_fold", &conv2d_fold_cpu};

}  // namespace meshlayout
