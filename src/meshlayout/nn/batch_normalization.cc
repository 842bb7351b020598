#include "meshlayout/nn/batch_normalization.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer("batch_normalization", options.name), options_(std::move(options)) {
  if (!std::isfinite(options_.epsilon) || options_.epsilon <= 0) {
    throw ValueError(fmt::format("BatchNormalization epsilon must be finite and > 0, got {}",
                                 options_.epsilon));
  }
  if (!(options_.momentum >= 0 && options_.momentum <= 1)) {
    throw ValueError(fmt::format("BatchNormalization momentum must be in [0, 1], got {}",
                                 options_.momentum));
  }
}

void BatchNormalization::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("BatchNormalization layer {} needs inputs of rank >= 1, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  features_ = input_shape.back();
  const Shape shape{features_};
  if (options_.scale) {
    gamma_ = add_weight({.name = "gamma", .shape = shape, .initializer = options_.gamma_initializer,
                         .layout = options_.gamma_layout});
  }
  if (options_.center) {
    beta_ = add_weight({.name = "beta", .shape = shape, .initializer = options_.beta_initializer,
                        .layout = options_.beta_layout});
  }
  moving_mean_ = add_weight({.name = "moving_mean", .shape = shape,
                             .initializer = options_.moving_mean_initializer, .trainable = false,
                             .layout = options_.moving_mean_layout});
  moving_variance_ = add_weight({.name = "moving_variance", .shape = shape,
                                 .initializer = options_.moving_variance_initializer,
                                 .trainable = false, .layout = options_.moving_variance_layout});
}

namespace {

const float* f32(const Array& a, const Array::Shard& s) {
  return reinterpret_cast<const float*>(a.shard_at(s.position)->buffer.data());
}

}  // namespace

void BatchNormalization::check_call_input(const Array& x) const {
  if (x.dtype() != DType::kF32) {
    throw ValueError(fmt::format("BatchNormalization layer {} runs on F32 tensors, got {} of shape {}",
                                 quote(name()), dtype_name(x.dtype()), shape_to_string(x.shape())));
  }
  if (x.shape().empty() || x.shape().back() != features_) {
    throw ValueError(fmt::format("BatchNormalization layer {} was built for {} features (the last "
                                 "dimension), got an input of shape {}",
                                 quote(name()), features_, shape_to_string(x.shape())));
  }
}

TensorLayout BatchNormalization::data_layout(const Array& x) const {
  // The data go to the weights' mesh when it differs, else keep their layout.
  const DeviceMesh mesh = moving_mean_->value().mesh();
  return x.mesh() == mesh ? x.layout() : TensorLayout::replicated(static_cast<int>(x.shape().size()), mesh);
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
  const int64_t n = features_ == 0 ? 0 : num_elements(xs.shape()) / features_;
  const float inv_n = n == 0 ? 0.0f : static_cast<float>(1.0 / static_cast<double>(n));
  auto scale = [&](Array& a) {
    for (Array::Shard& s : a.local_shards()) {
      float* p = reinterpret_cast<float*>(s.buffer.data());
      for (int64_t k = 0; k < s.box.num_elements(); ++k) p[k] *= inv_n;
    }
  };
  Array mean = sum_over_leading(xs, 1, feature_layout);
  scale(mean);
  Array squares = allocate_agreed(xs.layout(), xs.shape(), DType::kF32, xs.runtime_ptr());
  squares.runtime().pool().parallel_for(squares.local_shards().size(), [&](size_t i) {
    Array::Shard& s = squares.local_shards()[i];
    const int64_t cols = s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const float* v = f32(xs, s);
    const float* m = f32(mean, s);
    float* p = reinterpret_cast<float*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double d = static_cast<double>(v[r * cols + c]) - m[c];
        p[r * cols + c] = static_cast<float>(d * d);
      }
    }
  });
  Array variance = sum_over_leading(squares, 1, feature_layout);
  scale(variance);
  return {std::move(mean), std::move(variance)};
}

void BatchNormalization::update_moving(const Moments& batch) {
  // Keras: moving = moving × momentum + batch × (1 - momentum) (the biased batch variance).
  const double momentum = options_.momentum;
  auto update = [&](const VariablePtr& v, const Array& stat) {
    Array moved = distribute_tensor(v->value(), stat.layout());
    for (Array::Shard& s : moved.local_shards()) {
      float* p = reinterpret_cast<float*>(s.buffer.data());
      const float* b = f32(stat, s);
      for (int64_t k = 0; k < s.box.num_elements(); ++k) {
        p[k] = static_cast<float>(p[k] * momentum + b[k] * (1.0 - momentum));
      }
    }
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
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    const int64_t cols = s.box.shape.empty() ? 0 : s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const float* g = gamma ? f32(*gamma, s) : nullptr;
    const float* b = beta ? f32(*beta, s) : nullptr;
    const float* m = f32(stats.mean, s);
    const float* v = f32(stats.variance, s);
    float* p = reinterpret_cast<float*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        double out = (p[r * cols + c] - static_cast<double>(m[c])) / std::sqrt(static_cast<double>(v[c]) + epsilon);
        if (g) out *= g[c];
        if (b) out += b[c];
        p[r * cols + c] = static_cast<float>(out);
      }
    }
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
    throw FailedPreconditionError(fmt::format("BatchNormalization layer {} is not built: call it "
                                              "before its backward", quote(name())));
  }
  check_call_input(x);
  check_output_gradient(name(), dy, x.shape());
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
  if (training_ || want_dgamma) xhat_dy.emplace(allocate_agreed(target, x.shape(), DType::kF32, xs.runtime_ptr()));
  const double epsilon = options_.epsilon;
  auto inv_std = [&](const float* v, int64_t c) { return 1.0 / std::sqrt(static_cast<double>(v[c]) + epsilon); };
  if (xhat_dy) {
    xhat_dy->runtime().pool().parallel_for(xhat_dy->local_shards().size(), [&](size_t i) {
      Array::Shard& s = xhat_dy->local_shards()[i];
      const int64_t cols = s.box.shape.back();
      if (cols == 0 || s.box.num_elements() == 0) return;
      const float *v = f32(xs, s), *dv = f32(d, s), *m = f32(stats.mean, s), *var = f32(stats.variance, s);
      float* p = reinterpret_cast<float*>(s.buffer.data());
      for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t k = r * cols + c;
          p[k] = static_cast<float>(dv[k] * ((v[k] - static_cast<double>(m[c])) * inv_std(var, c)));
        }
      }
    });
    sum_xhat_dy.emplace(sum_over_leading(*xhat_dy, 1, feature_layout));
  }
  if (training_ || want_dbeta) sum_dy.emplace(sum_over_leading(d, 1, feature_layout));
  // dx = gamma / σ · (dy - Σdy / N - x̂ · Σ(dy·x̂) / N) in training mode (the batch statistics
  // depend on x), gamma / σ · dy with the moving statistics.
  const int64_t n = num_elements(x.shape()) / features_;
  Array dx = allocate_agreed(target, x.shape(), DType::kF32, xs.runtime_ptr());
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    const int64_t cols = s.box.shape.back();
    if (cols == 0 || s.box.num_elements() == 0) return;
    const float *v = f32(xs, s), *dv = f32(d, s), *m = f32(stats.mean, s), *var = f32(stats.variance, s);
    const float* g = gamma ? f32(*gamma, s) : nullptr;
    const float* sd = training_ ? f32(*sum_dy, s) : nullptr;
    const float* sx = training_ ? f32(*sum_xhat_dy, s) : nullptr;
    float* p = reinterpret_cast<float*>(s.buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t k = r * cols + c;
        const double inv = inv_std(var, c), scale = g ? g[c] * inv : inv;
        double out = dv[k];
        if (training_) {
          const double xhat = (v[k] - static_cast<double>(m[c])) * inv;
          out -= (sd[c] + xhat * sx[c]) / static_cast<double>(n);
        }
        p[k] = static_cast<float>(scale * out);
      }
    }
  });
  if (want_dgamma) grads.accumulate(*gamma_, std::move(*sum_xhat_dy));
  if (want_dbeta) grads.accumulate(*beta_, std::move(*sum_dy));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
