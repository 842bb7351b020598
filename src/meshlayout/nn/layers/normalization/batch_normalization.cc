#include "meshlayout/nn/layers/normalization/batch_normalization.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer("batch_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon <= 0) {
    throw ValueError(
        fmt::format("BatchNormalization epsilon must be finite and > 0, got {}", options_.epsilon));
  }
  if (!(options_.momentum >= 0 && options_.momentum <= 1)) {
    throw ValueError(
        fmt::format("BatchNormalization momentum must be in [0, 1], got {}", options_.momentum));
  }
}

void BatchNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(
        fmt::format("BatchNormalization layer {} needs inputs of rank >= 1, got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  const Shape shape{features_};
  if (options_.scale) {
    gamma_ = add_weight({.name = "gamma",
                         .shape = shape,
                         .initializer = options_.gamma_initializer,
                         .layout = options_.gamma_layout});
  }
  if (options_.center) {
    beta_ = add_weight({.name = "beta",
                        .shape = shape,
                        .initializer = options_.beta_initializer,
                        .layout = options_.beta_layout});
  }
  moving_mean_ = add_weight({.name = "moving_mean",
                             .shape = shape,
                             .initializer = options_.moving_mean_initializer,
                             .trainable = false,
                             .layout = options_.moving_mean_layout});
  moving_variance_ = add_weight({.name = "moving_variance",
                                 .shape = shape,
                                 .initializer = options_.moving_variance_initializer,
                                 .trainable = false,
                                 .layout = options_.moving_variance_layout});
  internal_nn::check_compute_dtype("BatchNormalization", name(), moving_mean_->dtype());
}

namespace {

// The elements of a's shard at s's position, as E (float for F32, double for F64).
template <typename E>
const E* data(const Array& a, const Array::Shard& s) {
  return reinterpret_cast<const E*>(a.shard_at(s.position)->buffer.data());
}

}  // namespace

void BatchNormalization::check_call_input(const Array& x) const {
  check_input_dtype("BatchNormalization", name(), x.dtype(), moving_mean_->dtype());
  if (x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(
        fmt::format("BatchNormalization layer {} was built for {} features (the last "
                    "dimension), got an input of shape {}",
                    quote(name()), features_, shape_to_string(x.shape())));
  }
}

TensorLayout BatchNormalization::data_layout(const Array& x) const {
  // The data go to the weights' mesh when it differs, else keep their layout.
  const DeviceMesh mesh = moving_mean_->value().mesh();
  return x.mesh() == mesh ? x.layout()
                          : TensorLayout::replicated(static_cast<int>(x.shape().size()), mesh);
}

BatchNormalization::Moments BatchNormalization::moments(const Array& xs) const {
  const TensorLayout feature_layout({xs.layout().axes().back()}, xs.mesh());
  if (!training_) {
    return {distribute_tensor(moving_mean_->value(), feature_layout),
            distribute_tensor(moving_variance_->value(), feature_layout)};
  }
  // Batch statistics over every axis but the last, across the global batch: the sums run
  // through sum_over_leading, whose contraction over a batch split (over devices or processes)
  // is completed by matmul's collective. Two passes: mean, then the mean of (x - mean)².
  // E: float (F32) or double (F64), the element type of xs and of the statistics.
  const int64_t n = features_ == 0 ? 0 : num_elements(xs.shape()) / features_;
  const double inv_n = n == 0 ? 0.0 : 1.0 / static_cast<double>(n);
  const auto scale = [&]<typename E>(Array& a, E* /*tag*/) {
    const E factor = static_cast<E>(inv_n);
    for (Array::Shard& s : a.local_shards()) {
      E* p = reinterpret_cast<E*>(s.buffer.data());
      for (int64_t k = 0; k < s.box.num_elements(); ++k) p[k] *= factor;
    }
  };
  const auto deviations = [&]<typename E>(Array& squares, const Array& mean, size_t i, E* /*tag*/) {
    Array::Shard& s = squares.local_shards()[i];
    const int64_t cols = s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const E* v = data<E>(xs, s);
    const E* m = data<E>(mean, s);
    E* p = reinterpret_cast<E*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(v[r * cols + c]) - m[c];
        p[r * cols + c] = static_cast<E>(d * d);
      }
    }
  };
  Array mean = sum_over_leading(xs, 1, feature_layout);
  internal_nn::dispatch_float(xs.dtype(), [&](auto* tag) { scale(mean, tag); });
  Array squares = allocate_agreed(xs.layout(), xs.shape(), xs.dtype(), xs.runtime_ptr());
  squares.runtime().pool().parallel_for(squares.local_shards().size(), [&](size_t i) {
    internal_nn::dispatch_float(xs.dtype(), [&](auto* tag) { deviations(squares, mean, i, tag); });
  });
  Array variance = sum_over_leading(squares, 1, feature_layout);
  internal_nn::dispatch_float(xs.dtype(), [&](auto* tag) { scale(variance, tag); });
  return {std::move(mean), std::move(variance)};
}

void BatchNormalization::update_moving(const Moments& batch) {
  // Keras: moving = moving × momentum + batch × (1 - momentum) (the biased batch variance).
  const double momentum = options_.momentum;
  // E: float (F32) or double (F64), the moving statistics' element type.
  const auto update_shards = [&]<typename E>(Array& moved, const Array& stat, E* /*tag*/) {
    for (Array::Shard& s : moved.local_shards()) {
      E* p = reinterpret_cast<E*>(s.buffer.data());
      const E* b = data<E>(stat, s);
      for (int64_t k = 0; k < s.box.num_elements(); ++k) {
        p[k] = static_cast<E>(p[k] * momentum + b[k] * (1.0 - momentum));
      }
    }
  };
  auto update = [&](const VariablePtr& v, const Array& stat) {
    Array moved = distribute_tensor(v->value(), stat.layout());
    internal_nn::dispatch_float(moved.dtype(), [&](auto* tag) { update_shards(moved, stat, tag); });
    v->assign(moved);
  };
  update(moving_mean_, batch.mean);
  update(moving_variance_, batch.variance);
}

Array BatchNormalization::call(const Array& x) {
  check_call_input(x);
  Array y = distribute_tensor(x, data_layout(x));
  const DeviceMesh mesh = y.mesh();
  const TensorLayout weight_layout({y.layout().axes().back()}, mesh);
  auto local = [&](const VariablePtr& v) -> std::optional<Array> {
    if (!v) return std::nullopt;
    return distribute_tensor(v->value(), weight_layout);
  };
  const std::optional<Array> gamma = local(gamma_), beta = local(beta_);
  const Moments stats = moments(y);
  const double epsilon = options_.epsilon;
  // E: float (F32) or double (F64), the element type of x, the weights and y; in double within.
  const auto normalize = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = y.local_shards()[i];
    const int64_t cols = s.box.shape.empty() ? 0 : s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const E* g = gamma ? data<E>(*gamma, s) : nullptr;
    const E* b = beta ? data<E>(*beta, s) : nullptr;
    const E* m = data<E>(stats.mean, s);
    const E* v = data<E>(stats.variance, s);
    E* p = reinterpret_cast<E*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        double out = (p[r * cols + c] - static_cast<double>(m[c])) /
                     std::sqrt(static_cast<double>(v[c]) + epsilon);
        if (g) out *= g[c];
        if (b) out += b[c];
        p[r * cols + c] = static_cast<E>(out);
      }
    }
  };
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    internal_nn::dispatch_float(y.dtype(), [&](auto* tag) { normalize(i, tag); });
  });
  if (training_ && update_moving_) update_moving(stats);
  return y;
}

Array BatchNormalization::recompute(const Array& x) {
  struct Restore {
    bool& flag;
    ~Restore() { flag = true; }
  } restore{update_moving_};
  update_moving_ = false;
  return Layer::recompute(x);
}

Array BatchNormalization::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!built()) {
    throw FailedPreconditionError(
        fmt::format("BatchNormalization layer {} is not built: call it "
                    "before its backward",
                    quote(name())));
  }
  check_call_input(x);
  check_output_gradient(name(), dy, x.shape(), x.dtype());
  const TensorLayout target = data_layout(x);
  const DeviceMesh mesh = target.device_mesh().value();
  const TensorLayout feature_layout({target.axes().back()}, mesh);
  std::optional<Array> x_moved, dy_moved, gamma;
  const Array& xs = in_layout(x, target, x_moved);
  const Array& d = in_layout(dy, target, dy_moved);
  const Moments stats = moments(xs);
  if (gamma_) gamma.emplace(distribute_tensor(gamma_->value(), feature_layout));
  // Per feature: Σ dy (d beta) and Σ dy·x̂ (d gamma); training mode needs both for dx too.
  const bool want_dgamma = gamma_ && gamma_->trainable(), want_dbeta = beta_ && beta_->trainable();
  std::optional<Array> xhat_dy, sum_dy, sum_xhat_dy;
  const DType dtype = x.dtype();
  if (training_ || want_dgamma)
    xhat_dy.emplace(allocate_agreed(target, x.shape(), dtype, xs.runtime_ptr()));
  const double epsilon = options_.epsilon;
  // E: float (F32) or double (F64), the element type of x, dy, the weights and the statistics.
  const auto inv_std = [&]<typename E>(const E* v, int64_t c) {
    return 1.0 / std::sqrt(static_cast<double>(v[c]) + epsilon);
  };
  const auto xhat_times_dy = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = xhat_dy->local_shards()[i];
    const int64_t cols = s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const E *v = data<E>(xs, s), *dv = data<E>(d, s), *m = data<E>(stats.mean, s),
            *var = data<E>(stats.variance, s);
    E* p = reinterpret_cast<E*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t k = r * cols + c;
        p[k] = static_cast<E>(dv[k] * ((v[k] - static_cast<double>(m[c])) * inv_std(var, c)));
      }
    }
  };
  if (xhat_dy) {
    xhat_dy->runtime().pool().parallel_for(xhat_dy->local_shards().size(), [&](size_t i) {
      internal_nn::dispatch_float(dtype, [&](auto* tag) { xhat_times_dy(i, tag); });
    });
    sum_xhat_dy.emplace(sum_over_leading(*xhat_dy, 1, feature_layout));
  }
  if (training_ || want_dbeta) sum_dy.emplace(sum_over_leading(d, 1, feature_layout));
  // dx = gamma / σ · (dy - Σdy / N - x̂ · Σ(dy·x̂) / N) in training mode (the batch statistics
  // depend on x), gamma / σ · dy with the moving statistics.
  const int64_t n = num_elements(x.shape()) / features_;
  Array dx = allocate_agreed(target, x.shape(), dtype, xs.runtime_ptr());
  const auto input_gradient = [&]<typename E>(size_t i, E* /*tag*/) {
    Array::Shard& s = dx.local_shards()[i];
    const int64_t cols = s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const E *v = data<E>(xs, s), *dv = data<E>(d, s), *m = data<E>(stats.mean, s),
            *var = data<E>(stats.variance, s);
    const E* g = gamma ? data<E>(*gamma, s) : nullptr;
    const E* sd = training_ ? data<E>(*sum_dy, s) : nullptr;
    const E* sx = training_ ? data<E>(*sum_xhat_dy, s) : nullptr;
    E* p = reinterpret_cast<E*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t k = r * cols + c;
        const double inv = inv_std(var, c), scale = g ? g[c] * inv : inv;
        double out = dv[k];
        if (training_) {
          const double xhat = (v[k] - static_cast<double>(m[c])) * inv;
          out -= (sd[c] + xhat * sx[c]) / static_cast<double>(n);
        }
        p[k] = static_cast<E>(scale * out);
      }
    }
  };
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    internal_nn::dispatch_float(dtype, [&](auto* tag) { input_gradient(i, tag); });
  });
  if (want_dgamma) grads.accumulate(*gamma_, std::move(*sum_xhat_dy));
  if (want_dbeta) grads.accumulate(*beta_, std::move(*sum_dy));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
