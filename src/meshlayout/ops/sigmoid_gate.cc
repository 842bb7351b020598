// sigmoid_gate.cc — see sigmoid_gate.h.
#include "meshlayout/ops/sigmoid_gate.h"

#include <fmt/format.h>

#include <optional>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/sigmoid_gate.h"

namespace meshlayout {
namespace {

void check(const char* op, const Array& g, const Array& s) {
  Shape want = s.shape();
  if (!want.empty()) want.back() = 1;
  if (s.shape().empty() || g.shape() != want || g.dtype() != s.dtype() ||
      (s.dtype() != DType::kF32 && s.dtype() != DType::kF64)) {
    throw ValueError(fmt::format(
        "{} needs g (…, 1) and s (…, n) of one dtype, F32 or F64, with the same leading "
        "dimensions; got g {} {} and s {} {}",
        op, dtype_name(g.dtype()), shape_to_string(g.shape()), dtype_name(s.dtype()),
        shape_to_string(s.shape())));
  }
}

// `layout` with its last dimension whole.
TensorLayout last_whole(const TensorLayout& layout) {
  std::vector<DimSharding> axes = layout.axes();
  axes.back() = None;
  return TensorLayout(std::move(axes), layout.device_mesh());
}

// x in `layout`: x itself when it already is, else a resharded copy held by `keep`.
const Array& in_layout(const Array& x, const TensorLayout& layout, std::optional<Array>& keep) {
  return x.layout() == layout ? x : keep.emplace(distribute_tensor(x, layout));
}

// sigmoid(g) times every row of a fresh copy of s in `layout` (s's leading sharding, g's rows).
Array gate_rows(const Array& g, const Array& s, const TensorLayout& layout) {
  std::optional<Array> moved;
  const Array& gs = in_layout(g, last_whole(layout), moved);
  Array y = distribute_tensor(s, layout);  // always a new array
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& sh = y.local_shards()[i];
    sigmoid_gate_shard(kind, {.y = &sh, .g = gs.shard_at(sh.position), .dtype = y.dtype()});
  });
  return y;
}

}  // namespace

Array sigmoid_gate(const Array& g, const Array& s) {
  check("sigmoid_gate", g, s);
  return gate_rows(g, s, s.layout());
}

SigmoidGateGrads sigmoid_gate_backward(const Array& g, const Array& s, const Array& dy) {
  check("sigmoid_gate_backward", g, s);
  if (dy.shape() != s.shape() || dy.dtype() != s.dtype()) {
    throw ValueError(
        fmt::format("sigmoid_gate_backward: dy {} {} must have s's shape and dtype {} {}",
                    dtype_name(dy.dtype()), shape_to_string(dy.shape()), dtype_name(s.dtype()),
                    shape_to_string(s.shape())));
  }
  Array ds = gate_rows(g, dy, dy.layout());
  // dg: every row whole on the devices that hold it, in dy's leading sharding.
  const TensorLayout rows = last_whole(dy.layout());
  std::optional<Array> s_moved, dy_moved;
  const Array& sw = in_layout(s, rows, s_moved);
  const Array& dyw = in_layout(dy, rows, dy_moved);
  Array dg = distribute_tensor(g, rows);  // a fresh copy, overwritten with the gradient
  const DeviceKind kind = kind_of(dg);
  dg.runtime().pool().parallel_for(dg.local_shards().size(), [&](size_t i) {
    Array::Shard& sh = dg.local_shards()[i];
    sigmoid_gate_backward_shard(kind, {.g = &sh,
                                       .s = sw.shard_at(sh.position),
                                       .dy = dyw.shard_at(sh.position),
                                       .dtype = dg.dtype()});
  });
  if (dg.layout() != g.layout()) dg = distribute_tensor(dg, g.layout());
  return {std::move(dg), std::move(ds)};
}

}  // namespace meshlayout
