// cpu/separable_conv2d.cc — the CPU implementation of kernels/separable_conv2d.h.
#include "meshlayout/kernels/separable_conv2d.h"

#include <algorithm>
#include <vector>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

using Geometry = DepthwiseConv2DGeometry;

// Calls f(oh, ow, i, j, ih, iw) for every output position and kernel tap reading the image
// (padding reads skipped).
template <typename F>
void for_each_tap(const Geometry& g, F&& f) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t ih = oh * g.sh + i - g.top;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t iw = ow * g.sw + j - g.left;
          if (iw < 0 || iw >= g.W) continue;
          f(oh, ow, i, j, ih, iw);
        }
      }
    }
  }
}

}  // namespace

void depthwise_conv2d_forward_cpu(const DepthwiseConv2DForward& args) {
  const Geometry& g = args.g;
  Array::Shard& out = *args.y;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* o = reinterpret_cast<E*>(out.buffer.data());
    const E* x = reinterpret_cast<const E*>(args.x->buffer.data());
    const E* k = reinterpret_cast<const E*>(args.kernel->buffer.data());
    const int64_t cm = g.C * g.M;
    std::vector<double> acc(static_cast<size_t>(g.OH * g.OW * cm));
    for (int64_t b = 0; b < out.box.shape[0]; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const E* image = x + b * g.H * g.W * g.C;
      for_each_tap(g, [&](int64_t oh, int64_t ow, int64_t i, int64_t j, int64_t ih, int64_t iw) {
        double* a = acc.data() + (oh * g.OW + ow) * cm;
        const E* px = image + (ih * g.W + iw) * g.C;
        const E* pk = k + (i * g.kw + j) * cm;  // depthwise[i, j, c, m] at c·M + m
        for (int64_t c = 0; c < g.C; ++c) {
          for (int64_t m = 0; m < g.M; ++m)
            a[c * g.M + m] += static_cast<double>(px[c]) * pk[c * g.M + m];
        }
      });
      E* dst = o + b * g.OH * g.OW * cm;
      for (size_t t = 0; t < acc.size(); ++t) dst[t] = static_cast<E>(acc[t]);
    }
  });
}

void depthwise_conv2d_backward_cpu(const DepthwiseConv2DBackward& args) {
  const Geometry& g = args.g;
  const int64_t cm = g.C * g.M;
  Array::Shard& out = *args.dx;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* dxo = reinterpret_cast<E*>(out.buffer.data());
    const E* xi = reinterpret_cast<const E*>(args.x->buffer.data());
    const E* gd = reinterpret_cast<const E*>(args.dy->buffer.data());
    const E* k = reinterpret_cast<const E*>(args.kernel->buffer.data());
    E* part =
        args.kernel_partials ? reinterpret_cast<E*>(args.kernel_partials->buffer.data()) : nullptr;
    std::vector<double> acc_x(static_cast<size_t>(g.H * g.W * g.C)),
        acc_k(static_cast<size_t>(g.kh * g.kw * cm));
    for (int64_t b = 0; b < out.box.shape[0]; ++b) {
      std::fill(acc_x.begin(), acc_x.end(), 0.0);
      std::fill(acc_k.begin(), acc_k.end(), 0.0);
      const E* image = xi + b * g.H * g.W * g.C;
      const E* grad = gd + b * g.OH * g.OW * cm;
      for_each_tap(g, [&](int64_t oh, int64_t ow, int64_t i, int64_t j, int64_t ih, int64_t iw) {
        const E* gv = grad + (oh * g.OW + ow) * cm;
        const E* pk = k + (i * g.kw + j) * cm;
        const E* px = image + (ih * g.W + iw) * g.C;
        double* ax = acc_x.data() + (ih * g.W + iw) * g.C;
        double* ak = acc_k.data() + (i * g.kw + j) * cm;
        for (int64_t c = 0; c < g.C; ++c) {
          for (int64_t m = 0; m < g.M; ++m) {
            const double gm = gv[c * g.M + m];
            ax[c] += gm * pk[c * g.M + m];
            ak[c * g.M + m] += gm * px[c];
          }
        }
      });
      E* dst = dxo + b * g.H * g.W * g.C;
      for (size_t t = 0; t < acc_x.size(); ++t) dst[t] = static_cast<E>(acc_x[t]);
      if (part) {
        E* pd = part + b * g.kh * g.kw * cm;
        for (size_t t = 0; t < acc_k.size(); ++t) pd[t] = static_cast<E>(acc_k[t]);
      }
    }
  });
}

}  // namespace meshlayout
