#include "meshlayout/nn/layers/normalization/layer_normalization.h"

#include <optional>

#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/normalization.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/layers/normalization/normalization_core.h"

namespace meshlayout {

LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : Layer("layer_normalization", options.name), options_(std::move(options)) {
  internal_nn::check_epsilon("LayerNormalization", options_.epsilon);
}

void LayerNormalization::build(const Shape& input_shape) {
  features_ = internal_nn::normalized_features("LayerNormalization", name(), input_shape);
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
  internal_nn::check_built_dtype("LayerNormalization", name(), compute_dtype());
}

DType LayerNormalization::compute_dtype() const {
  if (gamma_) return gamma_->dtype();
  if (beta_) return beta_->dtype();
  return dtype();
}

DeviceMesh LayerNormalization::weights_mesh(const Array& x) const {
  // The data go to the weights' mesh when it differs (the weights define where the layer runs).
  const VariablePtr& any_weight = gamma_ ? gamma_ : beta_;
  return any_weight ? any_weight->value().mesh() : x.mesh();
}

Array LayerNormalization::call(const Array& x) {
  internal_nn::check_normalized_input("LayerNormalization", name(), x, compute_dtype(), features_);
  const DeviceMesh mesh = weights_mesh(x);
  Array y = distribute_tensor(x, internal_nn::whole_rows_layout(x, mesh));

  const TensorLayout weight_layout({y.layout().axes().back()}, mesh);
  std::optional<Array> gamma, beta;
  if (gamma_) gamma.emplace(distribute_tensor(gamma_->value(), weight_layout));
  if (beta_) beta.emplace(distribute_tensor(beta_->value(), weight_layout));
  // In y's dtype (x's and the weights'), the statistics in double (kernels/normalization.h).
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    layer_norm_forward(kind, {.y = &s,
                              .gamma = gamma ? gamma->shard_at(s.position) : nullptr,
                              .beta = beta ? beta->shard_at(s.position) : nullptr,
                              .features = features_,
                              .epsilon = options_.epsilon,
                              .dtype = y.dtype()});
  });
  return y;
}

Array LayerNormalization::backward(const Array& x, const Array& dy, Gradients& grads) {
  internal_nn::check_normalized_backward("LayerNormalization", name(), built(), x, dy,
                                         compute_dtype(), features_);
  const DeviceMesh mesh = weights_mesh(x);
  const TensorLayout target = internal_nn::whole_rows_layout(x, mesh);  // whole rows, as the call
  std::optional<Array> x_moved, dy_moved, gamma, xhat_dy;
  const Array& src = in_layout(x, target, x_moved);
  const Array& d_in = in_layout(dy, target, dy_moved);
  Array dx = allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr());
  if (gamma_)
    gamma.emplace(distribute_tensor(gamma_->value(), TensorLayout({DimSharding()}, mesh)));
  if (gamma_ && gamma_->trainable()) {
    xhat_dy.emplace(allocate_agreed(target, x.shape(), x.dtype(), src.runtime_ptr()));
  }
  // In x's dtype; the sums and coefficients in double (kernels/normalization.h).
  const DeviceKind kind = kind_of(dx);
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    layer_norm_backward(kind, {.dx = &s,
                               .xhat_dy = xhat_dy ? xhat_dy->shard_at(s.position) : nullptr,
                               .x = src.shard_at(s.position),
                               .dy = d_in.shard_at(s.position),
                               .gamma = gamma ? gamma->shard_at(s.position) : nullptr,
                               .features = features_,
                               .epsilon = options_.epsilon,
                               .dtype = dx.dtype()});
  });
  if (xhat_dy) grads.accumulate(*gamma_, sum_over_leading(*xhat_dy, 1, gamma_->value().layout()));
  if (beta_ && beta_->trainable())
    grads.accumulate(*beta_, sum_over_leading(d_in, 1, beta_->value().layout()));
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
