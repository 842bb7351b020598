// matmul_backward.cc — see matmul_backward.h.
#include "meshlayout/ops/matmul_backward.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "meshlayout/array/array_view.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/ops/matmul.h"

namespace meshlayout {
namespace {

template <typename T>
void transpose_box(const std::byte* src, std::byte* dst, int64_t rows, int64_t cols) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  constexpr int64_t kTile = 32;  // cache blocking
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i) {
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j) d[j * rows + i] = s[i * cols + j];
      }
    }
  }
}

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
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    const Array::Shard& s = *m.shard_at(o.position);
    if (m.dtype() == DType::kF32) {
      transpose_box<float>(s.buffer.data(), o.buffer.data(), s.box.shape[0], s.box.shape[1]);
    } else {
      transpose_box<double>(s.buffer.data(), o.buffer.data(), s.box.shape[0], s.box.shape[1]);
    }
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
