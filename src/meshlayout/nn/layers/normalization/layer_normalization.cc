#include "meshlayout/nn/layers/normalization/layer_normalization.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {

LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : Layer("layer_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon < 0) {
    throw ValueError(fmt::format("LayerNormalization epsilon must be finite and >= 0, got {}",
                                 options_.epsilon));
  }
}

void LayerNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(
        fmt::format("LayerNormalization layer {} needs inputs of rank >= 1, got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  if (options_.scale) {
    gamma_ = add_weight({.name = "gamma",
                         .shape = {features_},
                         .initializer = options_.gamma_initializer,
                         .layout = options_.gamma_layout});
  }
  if (options_.center) {
    beta_ = add_weight({.name = "beta",
                        .shape = {features_},
                        .initializer = options_.beta_initializer,
                        .layout = options_.beta_layout});
  }
  internal_nn::check_compute_dtype("LayerNormalization", name(), compute_dtype());
}

DType LayerNormalization::compute_dtype() const {
  if (gamma_) return gamma_->dtype();
  if (beta_) return beta_->dtype();
  return dtype();
}

void LayerNormalization::check_input(const Array& x) const {
  check_input_dtype("LayerNormalization", name(), x.dtype(), compute_dtype());
  if (x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(
        fmt::format("LayerNormalization layer {} was built for {} features (the last "
                    "dimension), got an input of shape {}",
                    quote(name()), features_, shape_to_string(x.shape())));
  }
}

Array LayerNormalization::call(const Array& x) {
  check_input(x);
  // The data go to the weights' mesh when it differs (the weights define where the layer runs).
  const VariablePtr& any_weight = gamma_ ? gamma_ : beta_;
  const DeviceMesh mesh = any_weight ? any_weight->value().mesh() : x.mesh();
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows: gather the last dimension if it is split
  Array y = distribute_tensor(x, TensorLayout(axes, mesh));

  const TensorLayout weight_layout({y.layout().axes().back()}, mesh);
  std::optional<Array> gamma, beta;
  if (gamma_) gamma.emplace(distribute_tensor(gamma_->value(), weight_layout));
  if (beta_) beta.emplace(distribute_tensor(beta_->value(), weight_layout));
  const int64_t row = features_;
  const double epsilon = options_.epsilon;
  // E: float (F32) or double (F64), the element type of x, the weights and y; the statistics
  // in double either way.
  const auto normalize = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = y.local_shards()[i];
    if (row == 0 || s.box.num_elements() == 0) return;
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const E* g =
        gamma ? reinterpret_cast<const E*>(gamma->shard_at(s.position)->buffer.data()) : nullptr;
    const E* b =
        beta ? reinterpret_cast<const E*>(beta->shard_at(s.position)->buffer.data()) : nullptr;
    const int64_t rows = s.box.num_elements() / row;
    for (int64_t r = 0; r < rows; ++r) {
      E* v = p + r * row;
      double mean = 0;
      for (int64_t k = 0; k < row; ++k) mean += v[k];
      mean /= static_cast<double>(row);
      double var = 0;
      for (int64_t k = 0; k < row; ++k) var += (v[k] - mean) * (v[k] - mean);
      var /= static_cast<double>(row);
      const double inv = 1.0 / std::sqrt(var + epsilon);
      for (int64_t k = 0; k < row; ++k) {
        double out = (v[k] - mean) * inv;
        if (g) out *= g[k];
        if (b) out += b[k];
        v[k] = static_cast<E>(out);
      }
    }
  };
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    internal_nn::dispatch_float(y.dtype(), [&](auto* tag) { normalize(i, tag); });
  });
  return y;
}

Array LayerNormalization::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!built()) {
    throw FailedPreconditionError(
        fmt::format("LayerNormalization layer {} is not built: call it "
                    "before its backward",
                    quote(name())));
  }
  check_input(x);
  check_output_gradient(name(), dy, x.shape(), x.dtype());
  const VariablePtr& any_weight = gamma_ ? gamma_ : beta_;
  const DeviceMesh mesh = any_weight ? any_weight->value().mesh() : x.mesh();
  const int rank = static_cast<int>(x.shape().size());
  std::vector<DimSharding> axes =
      x.mesh() == mesh ? x.layout().axes() : std::vector<DimSharding>(static_cast<size_t>(rank));
  axes.back() = DimSharding();  // whole rows, as the call
  const TensorLayout target(axes, mesh);
  std::optional<Array> x_moved, dy_moved, gamma, xhat_dy;
  const Array& src = in_layout(x, target, x_moved);
  const Array& d_in = in_layout(dy, target, dy_moved);
  Array dx = allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr());
  if (gamma_)
    gamma.emplace(distribute_tensor(gamma_->value(), TensorLayout({DimSharding()}, mesh)));
  if (gamma_ && gamma_->trainable()) {
    xhat_dy.emplace(allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr()));
  }
  const int64_t row = features_;
  const double epsilon = options_.epsilon;
  // E: float (F32) or double (F64); the sums and coefficients in double either way.
  const auto backward_rows = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = dx.local_shards()[i];
    if (row == 0 || s.box.num_elements() == 0) return;
    E* out = reinterpret_cast<E*>(s.buffer.data());
    E* c = xhat_dy ? reinterpret_cast<E*>(xhat_dy->shard_at(s.position)->buffer.data()) : nullptr;
    const E* v = reinterpret_cast<const E*>(src.shard_at(s.position)->buffer.data());
    const E* d = reinterpret_cast<const E*>(d_in.shard_at(s.position)->buffer.data());
    const E* g =
        gamma ? reinterpret_cast<const E*>(gamma->shard_at(s.position)->buffer.data()) : nullptr;
    for (int64_t r = 0; r < s.box.num_elements() / row; ++r) {
      const int64_t o = r * row;
      double mean = 0;
      for (int64_t k = 0; k < row; ++k) mean += v[o + k];
      mean /= static_cast<double>(row);
      double var = 0;
      for (int64_t k = 0; k < row; ++k) var += (v[o + k] - mean) * (v[o + k] - mean);
      var /= static_cast<double>(row);
      const double inv = 1.0 / std::sqrt(var + epsilon);
      double mean_d = 0, mean_dx = 0;  // mean(d), mean(d·x̂), d = dy·gamma
      for (int64_t k = 0; k < row; ++k) {
        const double dk = g ? static_cast<double>(d[o + k]) * g[k] : d[o + k];
        mean_d += dk;
        mean_dx += dk * (v[o + k] - mean) * inv;
      }
      mean_d /= static_cast<double>(row);
      mean_dx /= static_cast<double>(row);
      for (int64_t k = 0; k < row; ++k) {
        const double xhat = (v[o + k] - mean) * inv;
        const double dk = g ? static_cast<double>(d[o + k]) * g[k] : d[o + k];
        out[o + k] = static_cast<E>(inv * (dk - mean_d - xhat * mean_dx));
        if (c) c[o + k] = static_cast<E>(d[o + k] * xhat);
      }
    }
  };
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    internal_nn::dispatch_float(dx.dtype(), [&](auto* tag) { backward_rows(i, tag); });
  });
  if (xhat_dy) grads.accumulate(*gamma_, sum_over_leading(*xhat_dy, 1, gamma_->value().layout()));
  if (beta_ && beta_->trainable())
    grads.accumulate(*beta_, sum_over_leading(d_in, 1, beta_->value().layout()));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
