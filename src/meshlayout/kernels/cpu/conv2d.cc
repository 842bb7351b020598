// cpu/conv2d.cc — the CPU implementation of kernels/conv2d.h.
#include "meshlayout/kernels/conv2d.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

// im2col of one image (H, W, C): row (oh, ow) of `columns` holds the patch (i, j, c) in the
// kernel's row-major order, zeros where it reads padding. E: float (F32) or double (F64).
template <typename E>
void im2col(const Conv2DGeometry& g, const E* image, E* columns) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      E* row = columns + (oh * g.OW + ow) * g.patch();
      for (int64_t di = 0; di < g.kh; ++di) {
        const int64_t ih = oh * g.sh + di - g.top;
        for (int64_t dj = 0; dj < g.kw; ++dj) {
          const int64_t iw = ow * g.sw + dj - g.left;
          E* dst = row + (di * g.kw + dj) * g.C;
          if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) {
            std::fill(dst, dst + g.C, E{0});
          } else {
            std::memcpy(dst, image + (ih * g.W + iw) * g.C, static_cast<size_t>(g.C) * sizeof(E));
          }
        }
      }
    }
  }
}

// The adjoint of im2col: each patch element of `columns` is added to the image element it was
// read from (padding reads are dropped). `image` (H, W, C) must be zeroed first.
template <typename E>
void col2im_add(const Conv2DGeometry& g, const E* columns, E* image) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      const E* row = columns + (oh * g.OW + ow) * g.patch();
      for (int64_t di = 0; di < g.kh; ++di) {
        const int64_t ih = oh * g.sh + di - g.top;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t dj = 0; dj < g.kw; ++dj) {
          const int64_t iw = ow * g.sw + dj - g.left;
          if (iw < 0 || iw >= g.W) continue;
          const E* src = row + (di * g.kw + dj) * g.C;
          E* dst = image + (ih * g.W + iw) * g.C;
          for (int64_t c = 0; c < g.C; ++c) dst[c] += src[c];
        }
      }
    }
  }
}

}  // namespace

void conv2d_forward_cpu(const Conv2DForward& args) {
  const Conv2DGeometry& g = args.g;
  const int64_t patch = g.patch();
  Array::Shard& out = *args.y;
  const Array::Shard* xs = args.x;
  const Array::Shard* ks = args.kernel;
  cpu_kernels::use_single_threaded_blas();
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const int64_t images = out.box.shape[0], nf = out.box.shape[3];
    if (images == 0 || nf == 0 || g.OH * g.OW == 0) return;
    std::vector<E> columns(static_cast<size_t>(g.OH * g.OW * patch));
    for (int64_t b = 0; b < images; ++b) {
      im2col(g, reinterpret_cast<const E*>(xs->buffer.data()) + b * g.H * g.W * g.C,
             columns.data());
      E* result = reinterpret_cast<E*>(out.buffer.data()) + b * g.OH * g.OW * nf;
      cpu_kernels::gemm<E>(g.OH * g.OW, nf, patch, columns.data(), patch,
                           reinterpret_cast<const E*>(ks->buffer.data()), nf, result, nf);
    }
  });
}

void conv2d_unfold_cpu(const Conv2DUnfold& args) {
  const Conv2DGeometry& g = args.g;
  const int64_t patch = g.patch();
  Array::Shard& s = *args.columns;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    const E* image = reinterpret_cast<const E*>(args.x->buffer.data());
    E* col = reinterpret_cast<E*>(s.buffer.data());
    for (int64_t b = 0; b < s.box.shape[0]; ++b) {
      im2col(g, image + b * g.H * g.W * g.C, col + b * g.OH * g.OW * patch);
    }
  });
}

void conv2d_fold_cpu(const Conv2DFold& args) {
  const Conv2DGeometry& g = args.g;
  const int64_t patch = g.patch();
  Array::Shard& s = *args.dx;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* image = reinterpret_cast<E*>(s.buffer.data());
    std::fill(image, image + s.box.num_elements(), E{0});
    const E* col = reinterpret_cast<const E*>(args.columns->buffer.data());
    for (int64_t b = 0; b < s.box.shape[0]; ++b) {
      col2im_add(g, col + b * g.OH * g.OW * patch, image + b * g.H * g.W * g.C);
    }
  });
}

}  // namespace meshlayout
