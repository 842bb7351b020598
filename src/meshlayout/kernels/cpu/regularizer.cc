// cpu/regularizer.cc — the CPU implementation of kernels/regularizer.h.
#include "meshlayout/kernels/regularizer.h"

#include <cmath>

namespace meshlayout {
namespace {

// g[i] += l1 * sign(w[i]) + 2 * l2 * w[i] over n elements; sign(0) = 0, sign(NaN) = NaN.
template <typename T>
void add_penalty_gradient(const T* w, T* g, int64_t n, double l1, double l2) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = w[i];
    double d = 0.0;
    if (l1 != 0.0) d += l1 * (v > 0 ? 1.0 : v < 0 ? -1.0 : v * 0.0);
    if (l2 != 0.0) d += 2.0 * l2 * v;
    g[i] = static_cast<T>(static_cast<double>(g[i]) + d);
  }
}

}  // namespace

void penalty_sums_cpu(const PenaltySums& a) {
  const Array::Shard& s = *a.w;
  const int64_t n = s.box.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const double v = a.dtype == DType::kF32 ? reinterpret_cast<const float*>(s.buffer.data())[i]
                                            : reinterpret_cast<const double*>(s.buffer.data())[i];
    a.sums[0] += std::abs(v);
    a.sums[1] += v * v;
  }
}

void penalty_gradient_cpu(const PenaltyGradient& a) {
  const int64_t n = a.g->box.num_elements();
  if (a.dtype == DType::kF32) {
    add_penalty_gradient(reinterpret_cast<const float*>(a.w->buffer.data()),
                         reinterpret_cast<float*>(a.g->buffer.data()), n, a.l1, a.l2);
  } else {
    add_penalty_gradient(reinterpret_cast<const double*>(a.w->buffer.data()),
                         reinterpret_cast<double*>(a.g->buffer.data()), n, a.l1, a.l2);
  }
}

}  // namespace meshlayout
