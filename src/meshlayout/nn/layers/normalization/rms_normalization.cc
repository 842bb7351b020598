#include "meshlayout/nn/layers/normalization/rms_normalization.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {

RMSNormalization::RMSNormalization(RMSNormalizationOptions options)
    : Layer("rms_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon < 0) {
    throw ValueError(
        fmt::format("RMSNormalization epsilon must be finite and >= 0, got {}", options_.epsilon));
  }
}

void RMSNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(
        fmt::format("RMSNormalization layer {} needs inputs of rank >= 1, got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  scale_ = add_weight({.name = "scale",
                       .shape = {features_},
                       .initializer = options_.scale_initializer,
                       .layout = options_.scale_layout});
}

void RMSNormalization::check_input(const Array& x) const {
  const DType dtype = scale_->dtype();
  if (x.dtype() != dtype || x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(
        fmt::format("RMSNormalization layer {} was built for {} inputs (its scale's dtype; "
                    "no cast) of {} features (the last dimension), got {} {}",
                    quote(name()), dtype_name(dtype), features_, dtype_name(x.dtype()),
                    shape_to_string(x.shape())));
  }
}

Array RMSNormalization::call(const Array& x) {
  check_input(x);
  const DeviceMesh mesh = scale_->value().mesh();
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows
  // Normalised straight from x into a new output when x already has whole rows (no copy).
  const TensorLayout target(axes, mesh);
  std::optional<Array> moved;
  const Array& src = x.layout() == target ? x : moved.emplace(distribute_tensor(x, target));
  Array y = allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr());
  const Array scale = distribute_tensor(scale_->value(), TensorLayout({DimSharding()}, mesh));
  const int64_t row = features_;
  const double epsilon = options_.epsilon;
  // E: float (F32) or double (F64), the element type of x, the scale and y.
  const auto normalize = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = y.local_shards()[i];
    if (row == 0 || s.box.num_elements() == 0) return;
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const E* in = reinterpret_cast<const E*>(src.shard_at(s.position)->buffer.data());
    const E* g = reinterpret_cast<const E*>(scale.shard_at(s.position)->buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / row; ++r) {
      const E* v = in + r * row;
      E* out = p + r * row;
      // Eight E lanes (vectorised), summed in double: F32 within float rounding of a double sum.
      E lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= row; k += 8) {
        for (int j = 0; j < 8; ++j) lanes[j] += v[k + j] * v[k + j];
      }
      double squares = 0;
      for (; k < row; ++k) squares += static_cast<double>(v[k]) * v[k];
      for (E lane : lanes) squares += lane;
      const E inv = static_cast<E>(1.0 / std::sqrt(squares / static_cast<double>(row) + epsilon));
      for (k = 0; k < row; ++k) out[k] = v[k] * inv * g[k];
    }
  };
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    if (y.dtype() == DType::kF32) {
      normalize(i, static_cast<float*>(nullptr));
    } else {
      normalize(i, static_cast<double*>(nullptr));
    }
  });
  return y;
}

Array RMSNormalization::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!scale_) {
    throw FailedPreconditionError(
        fmt::format("RMSNormalization layer {} is not built: call it before "
                    "its backward",
                    quote(name())));
  }
  check_input(x);
  check_output_gradient(name(), dy, x.shape(), x.dtype());
  const DeviceMesh mesh = scale_->value().mesh();
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows, as the call
  const TensorLayout target(axes, mesh);
  std::optional<Array> x_moved, dy_moved;
  const Array& src = in_layout(x, target, x_moved);
  const Array& g_in = in_layout(dy, target, dy_moved);
  Array dx = allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr());
  const bool want_scale = scale_->trainable();
  std::optional<Array> contrib;  // dy·x·r, summed over rows below
  if (want_scale) contrib.emplace(allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr()));
  const Array scale = distribute_tensor(scale_->value(), TensorLayout({DimSharding()}, mesh));
  const int64_t row = features_;
  const double epsilon = options_.epsilon;
  // E: float (F32) or double (F64); the sums and coefficients in double either way.
  const auto backward_rows = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = dx.local_shards()[i];
    if (row == 0 || s.box.num_elements() == 0) return;
    E* out = reinterpret_cast<E*>(s.buffer.data());
    E* c = contrib ? reinterpret_cast<E*>(contrib->shard_at(s.position)->buffer.data()) : nullptr;
    const E* in = reinterpret_cast<const E*>(src.shard_at(s.position)->buffer.data());
    const E* d = reinterpret_cast<const E*>(g_in.shard_at(s.position)->buffer.data());
    const E* g = reinterpret_cast<const E*>(scale.shard_at(s.position)->buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / row; ++r) {
      const int64_t o = r * row;
      double squares = 0, dot = 0;  // Σ x², Σ g·dy·x
      for (int64_t k = 0; k < row; ++k) {
        squares += static_cast<double>(in[o + k]) * in[o + k];
        dot += static_cast<double>(g[k]) * d[o + k] * in[o + k];
      }
      const double inv = 1.0 / std::sqrt(squares / static_cast<double>(row) + epsilon);
      const double coef = inv * inv * inv * dot / static_cast<double>(row);
      for (int64_t k = 0; k < row; ++k) {
        out[o + k] = static_cast<E>(inv * g[k] * d[o + k] - coef * in[o + k]);
        if (c) c[o + k] = static_cast<E>(static_cast<double>(d[o + k]) * in[o + k] * inv);
      }
    }
  };
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    if (dx.dtype() == DType::kF32) {
      backward_rows(i, static_cast<float*>(nullptr));
    } else {
      backward_rows(i, static_cast<double*>(nullptr));
    }
  });
  if (contrib) grads.accumulate(*scale_, sum_over_leading(*contrib, 1, scale_->value().layout()));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
