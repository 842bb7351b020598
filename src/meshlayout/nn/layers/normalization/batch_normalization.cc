#include "meshlayout/nn/layers/normalization/batch_normalization.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/layers/normalization/normalization_core.h"

namespace meshlayout {

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer("batch_normalization", options.name), options_(std::move(options)) {
  internal_nn::check_epsilon("BatchNormalization", options_.epsilon, /*positive=*/true);
  if (!(options_.momentum >= 0 && options_.momentum <= 1)) {
    throw ValueError(
        fmt::format("BatchNormalization momentum must be in [0, 1], got {}", options_.momentum));
  }
}

void BatchNormalization::build(const Shape& input_shape) {
  features_ = internal_nn::normalized_features("BatchNormalization", name(), input_shape);
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
  internal_nn::check_built_dtype("BatchNormalization", name(), moving_mean_->dtype());
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
  // is completed by matmul's collective. Two passes: mean, then the mean of (x - mean)², each
  // sum scaled by 1/n in xs's dtype, the deviations squared in double (kernels/normalization.h).
  const int64_t n = features_ == 0 ? 0 : num_elements(xs.shape()) / features_;
  const double inv_n = n == 0 ? 0.0 : 1.0 / static_cast<double>(n);
  const DeviceKind kind = kind_of(xs);
  const auto scale = [&](Array& a) {
    for (Array::Shard& s : a.local_shards()) {
      scale_elements(kind, {.a = &s, .factor = inv_n, .dtype = xs.dtype()});
    }
  };
  Array mean = sum_over_leading(xs, 1, feature_layout);
  scale(mean);
  Array squares = allocate_agreed(xs.layout(), xs.shape(), xs.dtype(), xs.runtime_ptr());
  squares.runtime().pool().parallel_for(squares.local_shards().size(), [&](size_t i) {
    Array::Shard& s = squares.local_shards()[i];
    squared_deviations(kind, {.squares = &s,
                              .x = xs.shard_at(s.position),
                              .mean = mean.shard_at(s.position),
                              .dtype = xs.dtype()});
  });
  Array variance = sum_over_leading(squares, 1, feature_layout);
  scale(variance);
  return {std::move(mean), std::move(variance)};
}

void BatchNormalization::update_moving(const Moments& batch) {
  // Keras: moving = moving × momentum + batch × (1 - momentum) (the biased batch variance).
  auto update = [&](const VariablePtr& v, const Array& stat) {
    Array moved = distribute_tensor(v->value(), stat.layout());
    const DeviceKind kind = kind_of(moved);
    for (Array::Shard& s : moved.local_shards()) {
      moving_average_update(kind, {.moving = &s,
                                   .batch = stat.shard_at(s.position),
                                   .momentum = options_.momentum,
                                   .dtype = moved.dtype()});
    }
    v->assign(moved);
  };
  update(moving_mean_, batch.mean);
  update(moving_variance_, batch.variance);
}

Array BatchNormalization::call(const Array& x) {
  internal_nn::check_normalized_input("BatchNormalization", name(), x, moving_mean_->dtype(),
                                      features_);
  Array y = distribute_tensor(x, data_layout(x));
  const DeviceMesh mesh = y.mesh();
  const TensorLayout weight_layout({y.layout().axes().back()}, mesh);
  auto local = [&](const VariablePtr& v) -> std::optional<Array> {
    if (!v) return std::nullopt;
    return distribute_tensor(v->value(), weight_layout);
  };
  const std::optional<Array> gamma = local(gamma_), beta = local(beta_);
  const Moments stats = moments(y);
  // In y's dtype (x's, the weights' and the statistics'), in double within.
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    batch_norm_forward(kind, {.y = &s,
                              .gamma = gamma ? gamma->shard_at(s.position) : nullptr,
                              .beta = beta ? beta->shard_at(s.position) : nullptr,
                              .mean = stats.mean.shard_at(s.position),
                              .variance = stats.variance.shard_at(s.position),
                              .epsilon = options_.epsilon,
                              .dtype = y.dtype()});
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
  internal_nn::check_normalized_backward("BatchNormalization", name(), built(), x, dy,
                                         built() ? moving_mean_->dtype() : x.dtype(), features_);
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
  // In x's dtype (dy's, the weights' and the statistics'), in double within.
  const DeviceKind kind = kind_of(xs);
  if (xhat_dy) {
    xhat_dy->runtime().pool().parallel_for(xhat_dy->local_shards().size(), [&](size_t i) {
      Array::Shard& s = xhat_dy->local_shards()[i];
      batch_norm_xhat_dy(kind, {.xhat_dy = &s,
                                .x = xs.shard_at(s.position),
                                .dy = d.shard_at(s.position),
                                .mean = stats.mean.shard_at(s.position),
                                .variance = stats.variance.shard_at(s.position),
                                .epsilon = epsilon,
                                .dtype = dtype});
    });
    sum_xhat_dy.emplace(sum_over_leading(*xhat_dy, 1, feature_layout));
  }
  if (training_ || want_dbeta) sum_dy.emplace(sum_over_leading(d, 1, feature_layout));
  // dx = gamma / σ · (dy - Σdy / N - x̂ · Σ(dy·x̂) / N) in training mode (the batch statistics
  // depend on x), gamma / σ · dy with the moving statistics.
  const int64_t n = num_elements(x.shape()) / features_;
  Array dx = allocate_agreed(target, x.shape(), dtype, xs.runtime_ptr());
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    batch_norm_backward(kind,
                        {.dx = &s,
                         .x = xs.shard_at(s.position),
                         .dy = d.shard_at(s.position),
                         .mean = stats.mean.shard_at(s.position),
                         .variance = stats.variance.shard_at(s.position),
                         .gamma = gamma ? gamma->shard_at(s.position) : nullptr,
                         .sum_dy = training_ ? sum_dy->shard_at(s.position) : nullptr,
                         .sum_xhat_dy = training_ ? sum_xhat_dy->shard_at(s.position) : nullptr,
                         .count = n,
                         .epsilon = epsilon,
                         .dtype = dtype});
  });
  if (want_dgamma) grads.accumulate(*gamma_, std::move(*sum_xhat_dy));
  if (want_dbeta) grads.accumulate(*beta_, std::move(*sum_dy));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
