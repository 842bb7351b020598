#include "meshlayout/nn/layers/activations/prelu.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/prelu.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {
PReLU::PReLU(PReLUOptions options) : Layer("p_re_lu", options.name), options_(std::move(options)) {}

void PReLU::build(const Shape& input_shape) {
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  if (rank < 2) {
    throw ValueError(
        fmt::format("PReLU layer {} takes inputs of rank >= 2 (batch, …), got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  Shape param(input_shape.begin() + 1, input_shape.end());
  for (int64_t a : options_.shared_axes) {
    if (a < 1 || a >= rank) {
      throw ValueError(
          fmt::format("PReLU layer {}: shared_axes [{}] must be input axes in [1, {}] (not the "
                      "batch axis 0) for inputs of shape {}; got {}",
                      quote(name()), fmt::join(options_.shared_axes, ", "), rank - 1,
                      shape_to_string(input_shape), a));
    }
    param[static_cast<size_t>(a - 1)] = 1;
  }
  built_shape_ = input_shape;
  alpha_ = add_weight({.name = "alpha",
                       .shape = param,
                       .initializer = options_.alpha_initializer,
                       .regularizer = options_.alpha_regularizer,
                       .layout = options_.alpha_layout});
  internal_nn::check_compute_dtype("PReLU", name(), alpha_->dtype());
}

void PReLU::check_input(const Array& x) const {
  const Shape& s = x.shape();
  bool ok = s.size() == built_shape_.size();
  for (size_t d = 1; ok && d < s.size(); ++d) {
    const bool shared = std::find(options_.shared_axes.begin(), options_.shared_axes.end(),
                                  static_cast<int64_t>(d)) != options_.shared_axes.end();
    ok = shared || s[d] == built_shape_[d];
  }
  if (!ok) {
    throw ValueError(
        fmt::format("PReLU layer {} was built for inputs of shape {} (any batch{}), got {}",
                    quote(name()), shape_to_string(built_shape_),
                    options_.shared_axes.empty() ? "" : " and any size on the shared axes",
                    shape_to_string(s)));
  }
  check_input_dtype("PReLU", name(), x.dtype(), alpha_->dtype());
}

Array PReLU::alpha_on(const Array& x) const {
  const Array& a = alpha_->value();
  return distribute_tensor(a,
                           TensorLayout::replicated(static_cast<int>(a.shape().size()), x.mesh()));
}

namespace {

std::vector<int64_t> alpha_strides(const Shape& input, const Shape& alpha) {
  std::vector<int64_t> strides(input.size(), 0);
  int64_t stride = 1;
  for (size_t d = input.size(); d-- > 1;) {
    strides[d] = alpha[d - 1] == 1 ? 0 : stride;  // a shared axis (size 1) reads one alpha
    stride *= alpha[d - 1];
  }
  return strides;
}

}  // namespace

Array PReLU::call(const Array& x) {
  check_input(x);
  const Array alpha = alpha_on(x);
  Array y = distribute_tensor(x, x.layout());
  const std::vector<int64_t> strides = alpha_strides(x.shape(), alpha_->shape());
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    prelu_forward(kind, {.y = &s,
                         .alpha = alpha.shard_at(s.position),
                         .alpha_strides = strides,
                         .dtype = y.dtype()});
  });
  return y;
}

Array PReLU::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!alpha_) {
    throw FailedPreconditionError(
        fmt::format("PReLU layer {} is not built: call it before its backward", quote(name())));
  }
  check_input(x);
  check_output_gradient(name(), dy, x.shape(), x.dtype());
  const Array alpha = alpha_on(x);
  const std::vector<int64_t> strides = alpha_strides(x.shape(), alpha_->shape());
  Array dx = distribute_tensor(dy, x.layout());  // overwritten with dL/dx
  std::optional<Array> g;                        // dy · min(x, 0)
  if (alpha_->trainable()) g.emplace(distribute_tensor(dx, x.layout()));
  const DeviceKind kind = kind_of(dx);
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    prelu_backward(kind, {.dx = &s,
                          .g = g ? g->shard_at(s.position) : nullptr,
                          .x = x.shard_at(s.position),
                          .alpha = alpha.shard_at(s.position),
                          .alpha_strides = strides,
                          .dtype = dx.dtype()});
  });
  if (g) {
    // Σ over the batch (a partial sum over the batch split, completed by the collective) …
    const int trailing = static_cast<int>(x.shape().size()) - 1;
    const TensorLayout& alpha_layout = alpha_->value().layout();
    if (options_.shared_axes.empty() && alpha_->value().mesh() == x.mesh()) {
      grads.accumulate(*alpha_, sum_over_leading(*g, trailing, alpha_layout));
    } else {
      // … then over the shared axes, on each device's whole copy (the same on every device).
      const Shape sample(x.shape().begin() + 1, x.shape().end());
      const Array summed =
          sum_over_leading(*g, trailing, TensorLayout::replicated(trailing, x.mesh()));
      const Array::Shard& whole = summed.local_shards().front();
      std::vector<int64_t> to_alpha = alpha_strides(x.shape(), alpha_->shape());
      to_alpha.erase(to_alpha.begin());
      HostTensor da(x.dtype(), alpha_->shape());
      prelu_alpha_gradient(
          kind, {.summed = &whole, .sample = sample, .alpha_strides = to_alpha, .alpha_grad = &da});
      grads.accumulate(*alpha_, distribute_tensor(da, alpha_layout, {.runtime = x.runtime_ptr()}));
    }
  }
  return dx;
}

}  // namespace meshlayout
