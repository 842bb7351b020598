#include "meshlayout/nn/regularizer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/kernels/regularizer.h"

namespace meshlayout {
namespace {

void check_float(const Array& w, std::string_view what) {
  if (w.dtype() != DType::kF32 && w.dtype() != DType::kF64) {
    throw ValueError(fmt::format("regularisers apply to F32 or F64 weights, got {} for {}",
                                 dtype_name(w.dtype()), what));
  }
}

}  // namespace

double Regularizer::operator()(const Array& w) const {
  check_float(w, "the penalty");
  double sums[2] = {0.0, 0.0};  // sum |w|, sum w^2
  const DeviceKind kind = kind_of(w);
  for (const Array::Shard& s : w.local_shards()) {
    if (w.geometry().replica_of(s.position) != 0) continue;  // count every block once
    penalty_sums(kind, {.w = &s, .dtype = w.dtype(), .sums = sums});
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
  const DeviceKind kind = kind_of(grad);
  for (Array::Shard& g : grad.local_shards()) {
    penalty_gradient(
        kind, {.w = w.shard_at(g.position), .g = &g, .dtype = w.dtype(), .l1 = l1, .l2 = l2});
  }
}

Array Regularizer::gradient(const Array& w) const {
  check_float(w, "the penalty's gradient");
  // Allocated without an agreement: the shards are local, nothing is exchanged.
  Array g = Array::allocate(w.layout(), w.shape(), w.dtype(), w.runtime_ptr());
  const DeviceKind kind = kind_of(g);
  for (Array::Shard& s : g.local_shards())
    fill_scalar(kind, {.shard = &s, .dtype = g.dtype(), .value = 0.0f});
  accumulate_gradient(w, g);
  return g;
}

std::string Regularizer::to_string() const { return fmt::format("L1L2(l1={}, l2={})", l1, l2); }

}  // namespace meshlayout
