#include "meshlayout/nn/regularizer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

void check_float(const Array& w, std::string_view what) {
  if (w.dtype() != DType::kF32 && w.dtype() != DType::kF64) {
    throw ValueError(fmt::format("regularisers apply to F32 or F64 weights, got {} for {}",
                                 dtype_name(w.dtype()), what));
  }
}

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

double Regularizer::operator()(const Array& w) const {
  check_float(w, "the penalty");
  double sums[2] = {0.0, 0.0};  // sum |w|, sum w^2
  for (const Array::Shard& s : w.local_shards()) {
    if (w.geometry().replica_of(s.position) != 0) continue;  // count every block once
    const int64_t n = s.box.num_elements();
    for (int64_t i = 0; i < n; ++i) {
      const double v = w.dtype() == DType::kF32
                           ? reinterpret_cast<const float*>(s.buffer.data())[i]
                           : reinterpret_cast<const double*>(s.buffer.data())[i];
      sums[0] += std::abs(v);
      sums[1] += v * v;
    }
  }
  w.runtime().comm().all_reduce_sum(sums, 2, DType::kF64);
  return l1 * sums[0] + l2 * sums[1];
}

void Regularizer::accumulate_gradient(const Array& w, Array& grad) const {
  check_float(w, "the penalty's gradient");
  if (grad.shape() != w.shape() || grad.dtype() != w.dtype() || !(grad.layout() == w.layout())) {
    throw ValueError(fmt::format(
        "{}: the gradient must have the weight's shape, dtype and layout: weight {} {} {}, "
        "gradient {} {} {}",
        to_string(), shape_to_string(w.shape()), dtype_name(w.dtype()), w.layout().to_string(),
        shape_to_string(grad.shape()), dtype_name(grad.dtype()), grad.layout().to_string()));
  }
  for (Array::Shard& g : grad.local_shards()) {
    const Array::Shard* s = w.shard_at(g.position);
    const int64_t n = g.box.num_elements();
    if (w.dtype() == DType::kF32) {
      add_penalty_gradient(reinterpret_cast<const float*>(s->buffer.data()),
                           reinterpret_cast<float*>(g.buffer.data()), n, l1, l2);
    } else {
      add_penalty_gradient(reinterpret_cast<const double*>(s->buffer.data()),
                           reinterpret_cast<double*>(g.buffer.data()), n, l1, l2);
    }
  }
}

Array Regularizer::gradient(const Array& w) const {
  check_float(w, "the penalty's gradient");
  // Allocated without an agreement: the shards are local, nothing is exchanged.
  Array g = Array::allocate(w.layout(), w.shape(), w.dtype(), w.runtime_ptr());
  for (Array::Shard& s : g.local_shards()) std::memset(s.buffer.data(), 0, s.buffer.size());
  accumulate_gradient(w, g);
  return g;
}

std::string Regularizer::to_string() const { return fmt::format("L1L2(l1={}, l2={})", l1, l2); }

}  // namespace meshlayout
