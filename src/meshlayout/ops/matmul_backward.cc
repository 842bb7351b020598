// matmul_backward.cc — see matmul_backward.h.
#include "meshlayout/ops/matmul_backward.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "meshlayout/array/array_view.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/matmul.h"
#include "meshlayout/ops/matmul.h"

namespace meshlayout {
namespace {

// a (…, C) as (M, C) with the leading dims merged: a view when the layout allows it, else a
// reshard to a viewable layout first.
Array as_rows(const Array& a) {
  const Shape flat{
      a.shape().size() < 2 ? 1 : num_elements(Shape(a.shape().begin(), a.shape().end() - 1)),
      a.shape().back()};
  if (auto l = local_reshape_layout(a.layout(), a.shape(), flat)) return view_shards(a, flat, *l);
  Array r = distribute_tensor(a, viewable_layout(a.layout(), a.shape(), flat));
  const TensorLayout l = *local_reshape_layout(r.layout(), r.shape(), flat);
  return reshape_shards(std::move(r), flat, l);
}

}  // namespace

Array transpose(const Array& m) {
  if (m.shape().size() != 2 || (m.dtype() != DType::kF32 && m.dtype() != DType::kF64)) {
    throw ValueError(fmt::format("transpose needs a 2-D F32 or F64 array, got {} {}",
                                 shape_to_string(m.shape()), dtype_name(m.dtype())));
  }
  const TensorLayout t({m.layout().axes()[1], m.layout().axes()[0]}, m.mesh());
  Array out = allocate_agreed(t, {m.shape()[1], m.shape()[0]}, m.dtype(), m.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    transpose_box(kind, {.dst = &o, .src = m.shard_at(o.position), .dtype = m.dtype()});
  });
  return out;
}

Array matmul_backward_input(const Array& dy, const Array& w, const TensorLayout& x_layout,
                            MatmulPlan* plan_out) {
  if (w.shape().size() != 2 || dy.shape().empty() || dy.shape().back() != w.shape()[1]) {
    throw ValueError(
        fmt::format("matmul_backward_input: dy (…, N) must end in w's N for w (K, N), "
                    "got dy {} and w {}",
                    shape_to_string(dy.shape()), shape_to_string(w.shape())));
  }
  const Array wt = transpose(w);
  return matmul(dy, wt, {.output_layout = x_layout, .plan_out = plan_out});
}

Array matmul_backward_weight(const Array& x, const Array& dy, const TensorLayout& w_layout,
                             MatmulPlan* plan_out) {
  const Shape& xs = x.shape();
  const Shape& ys = dy.shape();
  if (xs.size() < 2 || xs.size() != ys.size() ||
      !std::equal(xs.begin(), xs.end() - 1, ys.begin())) {
    throw ValueError(
        fmt::format("matmul_backward_weight: x (…, K) and dy (…, N) must share their "
                    "leading dimensions (rank >= 2), got x {} and dy {}",
                    shape_to_string(xs), shape_to_string(ys)));
  }
  const Array xt = transpose(as_rows(x));  // (K, M)
  const Array dy2 = as_rows(dy);           // (M, N)
  return matmul(xt, dy2, {.output_layout = w_layout, .plan_out = plan_out});
}

DenseGrads matmul_backward(const Array& x, const Array& w, const Array& dy) {
  if (w.shape().size() != 2 || x.shape().empty() || x.shape().back() != w.shape()[0]) {
    throw ValueError(
        fmt::format("matmul_backward: x (…, K) must end in w's K for w (K, N), got x "
                    "{} and w {}",
                    shape_to_string(x.shape()), shape_to_string(w.shape())));
  }
  Array dx = matmul_backward_input(dy, w, x.layout());
  Array dw = matmul_backward_weight(x, dy, w.layout());
  return {std::move(dx), std::move(dw)};
}

}  // namespace meshlayout
