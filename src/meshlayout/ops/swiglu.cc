// swiglu.cc — see swiglu.h.
#include "meshlayout/ops/swiglu.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

void check_operand(const Array& g, const Array& x, std::string_view what) {
  if (x.shape() != g.shape() || x.dtype() != g.dtype() ||
      (g.dtype() != DType::kF32 && g.dtype() != DType::kF64)) {
    throw ValueError(
        fmt::format("swiglu needs gate and {} of one shape and dtype (F32 or F64), got gate {} {} "
                    "and {} {} {}",
                    what, shape_to_string(g.shape()), dtype_name(g.dtype()), what,
                    shape_to_string(x.shape()), dtype_name(x.dtype())));
  }
}

// x in `layout` (a reference to x itself when it already is).
const Array& aligned(const Array& x, const TensorLayout& layout, std::optional<Array>& holder) {
  return x.layout() == layout ? x : holder.emplace(distribute_tensor(x, layout));
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

Array swiglu(const Array& g, const Array& u) {
  check_operand(g, u, "up");
  std::optional<Array> hold_u;
  const Array& ua = aligned(u, g.layout(), hold_u);
  Array out = allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr());
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    const int64_t n = o.box.num_elements();
    const auto run = [&](auto* y, const auto* gp, const auto* up) {
      for (int64_t k = 0; k < n; ++k) y[k] = gp[k] * sigmoid(gp[k]) * up[k];
    };
    if (g.dtype() == DType::kF32) {
      run(reinterpret_cast<float*>(o.buffer.data()),
          reinterpret_cast<const float*>(g.shard_at(o.position)->buffer.data()),
          reinterpret_cast<const float*>(ua.shard_at(o.position)->buffer.data()));
    } else {
      run(reinterpret_cast<double*>(o.buffer.data()),
          reinterpret_cast<const double*>(g.shard_at(o.position)->buffer.data()),
          reinterpret_cast<const double*>(ua.shard_at(o.position)->buffer.data()));
    }
  });
  return out;
}

SwigluGrads swiglu_backward(const Array& g, const Array& u, const Array& dy) {
  check_operand(g, u, "up");
  check_operand(g, dy, "output gradient");
  std::optional<Array> hold_u, hold_dy;
  const Array& ua = aligned(u, g.layout(), hold_u);
  const Array& dya = aligned(dy, g.layout(), hold_dy);
  SwigluGrads out{allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr()),
                  allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr())};
  out.dg.runtime().pool().parallel_for(out.dg.local_shards().size(), [&](size_t i) {
    Array::Shard& dg = out.dg.local_shards()[i];
    Array::Shard& du = out.du.local_shards()[i];
    const int64_t n = dg.box.num_elements();
    const auto run = [&](auto* dgp, auto* dup, const auto* gp, const auto* up, const auto* dyp) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(gp)>>;
      for (int64_t k = 0; k < n; ++k) {
        const T s = sigmoid(gp[k]);
        const T silu = gp[k] * s;
        dup[k] = dyp[k] * silu;
        dgp[k] = dyp[k] * up[k] * (s + silu * (T(1) - s));
      }
    };
    const auto* gs = g.shard_at(dg.position);
    const auto* us = ua.shard_at(dg.position);
    const auto* ds = dya.shard_at(dg.position);
    if (g.dtype() == DType::kF32) {
      run(reinterpret_cast<float*>(dg.buffer.data()), reinterpret_cast<float*>(du.buffer.data()),
          reinterpret_cast<const float*>(gs->buffer.data()),
          reinterpret_cast<const float*>(us->buffer.data()),
          reinterpret_cast<const float*>(ds->buffer.data()));
    } else {
      run(reinterpret_cast<double*>(dg.buffer.data()), reinterpret_cast<double*>(du.buffer.data()),
          reinterpret_cast<const double*>(gs->buffer.data()),
          reinterpret_cast<const double*>(us->buffer.data()),
          reinterpret_cast<const double*>(ds->buffer.data()));
    }
  });
  return out;
}

}  // namespace meshlayout
