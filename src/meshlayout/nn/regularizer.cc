#include "meshlayout/nn/regularizer.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"

namespace meshlayout {

double Regularizer::operator()(const Array& w) const {
  if (w.dtype() != DType::kF32 && w.dtype() != DType::kF64) {
    throw ValueError(fmt::format("regularisers apply to F32 or F64 weights, got {}",
                                 dtype_name(w.dtype())));
  }
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

std::string Regularizer::to_string() const { return fmt::format("L1L2(l1={}, l2={})", l1, l2); }

}  // namespace meshlayout
