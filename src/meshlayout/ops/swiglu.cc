// swiglu.cc — see swiglu.h.
#include "meshlayout/ops/swiglu.h"

#include <fmt/format.h>

#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"

namespace meshlayout {
namespace {

std::string_view op_name(GateFunction function) {
  return function == GateFunction::kSilu ? "swiglu" : "geglu";
}

void check_operand(GateFunction function, const Array& g, const Array& x, std::string_view what) {
  if (x.shape() != g.shape() || x.dtype() != g.dtype() ||
      (g.dtype() != DType::kF32 && g.dtype() != DType::kF64)) {
    throw ValueError(
        fmt::format("{} needs gate and {} of one shape and dtype (F32 or F64), got gate {} {} "
                    "and {} {} {}",
                    op_name(function), what, shape_to_string(g.shape()), dtype_name(g.dtype()),
                    what, shape_to_string(x.shape()), dtype_name(x.dtype())));
  }
}

// x in `layout` (a reference to x itself when it already is).
const Array& aligned(const Array& x, const TensorLayout& layout, std::optional<Array>& holder) {
  return x.layout() == layout ? x : holder.emplace(distribute_tensor(x, layout));
}

}  // namespace

Array gated_unit(GateFunction function, const Array& g, const Array& u) {
  check_operand(function, g, u, "up");
  std::optional<Array> hold_u;
  const Array& ua = aligned(u, g.layout(), hold_u);
  Array out = allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    gated_forward(kind, {.y = &o,
                         .g = g.shard_at(o.position),
                         .u = ua.shard_at(o.position),
                         .function = function,
                         .dtype = g.dtype()});
  });
  return out;
}

SwigluGrads gated_unit_backward(GateFunction function, const Array& g, const Array& u,
                                const Array& dy) {
  check_operand(function, g, u, "up");
  check_operand(function, g, dy, "output gradient");
  std::optional<Array> hold_u, hold_dy;
  const Array& ua = aligned(u, g.layout(), hold_u);
  const Array& dya = aligned(dy, g.layout(), hold_dy);
  SwigluGrads out{allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr()),
                  allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr())};
  const DeviceKind kind = kind_of(out.dg);
  out.dg.runtime().pool().parallel_for(out.dg.local_shards().size(), [&](size_t i) {
    Array::Shard& dg = out.dg.local_shards()[i];
    gated_backward(kind, {.dg = &dg,
                          .du = &out.du.local_shards()[i],
                          .g = g.shard_at(dg.position),
                          .u = ua.shard_at(dg.position),
                          .dy = dya.shard_at(dg.position),
                          .function = function,
                          .dtype = g.dtype()});
  });
  return out;
}

Array swiglu(const Array& g, const Array& u) { return gated_unit(GateFunction::kSilu, g, u); }

SwigluGrads swiglu_backward(const Array& g, const Array& u, const Array& dy) {
  return gated_unit_backward(GateFunction::kSilu, g, u, dy);
}

}  // namespace meshlayout
