// cpu/prelu.cc — the CPU implementation of kernels/prelu.h.
#include "meshlayout/kernels/prelu.h"

#include <vector>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

// Calls f(k, a) for every element of `box` (row-major, k its index in the box) with a its flat
// index into alpha, whose strides over the input's dimensions are `alpha_strides` (0 for the
// batch and the shared axes).
template <typename F>
void for_each_with_alpha(const Box& box, std::span<const int64_t> alpha_strides, F&& f) {
  const size_t rank = box.shape.size();
  const int64_t n = box.num_elements();
  if (n == 0) return;
  std::vector<int64_t> index(rank, 0);
  int64_t a = 0;
  for (size_t d = 0; d < rank; ++d) a += box.offset[d] * alpha_strides[d];
  for (int64_t k = 0; k < n; ++k) {
    f(k, a);
    for (size_t d = rank; d-- > 0;) {  // the odometer, last dimension fastest
      if (++index[d] < box.shape[d]) {
        a += alpha_strides[d];
        break;
      }
      a -= (box.shape[d] - 1) * alpha_strides[d];
      index[d] = 0;
    }
  }
}

}  // namespace

void prelu_forward_cpu(const PreluForward& args) {
  Array::Shard& s = *args.y;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const E* a = reinterpret_cast<const E*>(args.alpha->buffer.data());
    for_each_with_alpha(s.box, args.alpha_strides, [&](int64_t k, int64_t ai) {
      if (p[k] < E(0)) p[k] = a[ai] * p[k];
    });
  });
}

void prelu_backward_cpu(const PreluBackward& args) {
  Array::Shard& s = *args.dx;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* d = reinterpret_cast<E*>(s.buffer.data());
    E* gs = args.g ? reinterpret_cast<E*>(args.g->buffer.data()) : nullptr;
    const E* xv = reinterpret_cast<const E*>(args.x->buffer.data());
    const E* a = reinterpret_cast<const E*>(args.alpha->buffer.data());
    for_each_with_alpha(s.box, args.alpha_strides, [&](int64_t k, int64_t ai) {
      const bool negative = xv[k] < E(0);
      if (gs) gs[k] = negative ? gs[k] * xv[k] : E(0);
      if (!(xv[k] > E(0))) d[k] = negative ? d[k] * a[ai] : E(0);  // relu'(0) = 0, as autodiff
    });
  });
}

void prelu_alpha_gradient_cpu(const PreluAlphaGradient& args) {
  HostTensor& da = *args.alpha_grad;
  cpu_kernels::dispatch_float(da.dtype(), [&]<typename E>(E* /*tag*/) {
    std::vector<double> acc(static_cast<size_t>(da.num_elements()), 0.0);
    const E* v = reinterpret_cast<const E*>(args.summed->buffer.data());
    for_each_with_alpha(Box{Shape(args.sample.size(), 0), args.sample}, args.alpha_strides,
                        [&](int64_t k, int64_t ai) { acc[static_cast<size_t>(ai)] += v[k]; });
    for (size_t k = 0; k < acc.size(); ++k) da.data_as<E>()[k] = static_cast<E>(acc[k]);
  });
}

}  // namespace meshlayout
