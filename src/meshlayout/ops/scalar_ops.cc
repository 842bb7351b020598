#include "meshlayout/ops/scalar_ops.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/kernels/soft_cap.h"

namespace meshlayout {
namespace {

void check_float(const char* op, const Array& x) {
  if (x.dtype() != DType::kF32 && x.dtype() != DType::kF64) {
    throw ValueError(fmt::format("{} needs an F32 or F64 array, got {} {}", op,
                                 dtype_name(x.dtype()), shape_to_string(x.shape())));
  }
}

void check_cap(const char* op, double cap) {
  if (!(cap > 0) || !std::isfinite(cap)) {
    throw ValueError(fmt::format("{} needs a positive, finite cap, got {}", op, cap));
  }
}

// A copy of x in its own layout, on fresh buffers (distribute_tensor always makes a new array).
Array copy_of(const Array& x) { return distribute_tensor(x, x.layout()); }

}  // namespace

Array scale(Array&& x, double factor) {
  check_float("scale", x);
  const DeviceKind kind = kind_of(x);
  x.runtime().pool().parallel_for(x.local_shards().size(), [&](size_t i) {
    scale_shard(kind, {.shard = &x.local_shards()[i], .dtype = x.dtype(), .factor = factor});
  });
  return std::move(x);
}

Array scale(const Array& x, double factor) {
  check_float("scale", x);
  return scale(copy_of(x), factor);
}

Array soft_cap(const Array& x, double cap) {
  check_float("soft_cap", x);
  check_cap("soft_cap", cap);
  Array y = copy_of(x);
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    soft_cap_shard(kind, {.shard = &y.local_shards()[i], .dtype = y.dtype(), .cap = cap});
  });
  return y;
}

Array soft_cap_backward(const Array& y, const Array& dy, double cap) {
  check_float("soft_cap_backward", dy);
  check_cap("soft_cap_backward", cap);
  if (y.shape() != dy.shape() || y.dtype() != dy.dtype()) {
    throw ValueError(fmt::format(
        "soft_cap_backward: y {} {} and dy {} {} must share shape and dtype", dtype_name(y.dtype()),
        shape_to_string(y.shape()), dtype_name(dy.dtype()), shape_to_string(dy.shape())));
  }
  std::optional<Array> moved;
  const Array& ys =
      y.layout() == dy.layout() ? y : moved.emplace(distribute_tensor(y, dy.layout()));
  Array dx = copy_of(dy);
  const DeviceKind kind = kind_of(dx);
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    soft_cap_backward_shard(
        kind, {.dy = &s, .y = ys.shard_at(s.position), .dtype = dx.dtype(), .cap = cap});
  });
  return dx;
}

}  // namespace meshlayout
