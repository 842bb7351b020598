#include "meshlayout/nn/layers/convolutional/separable_conv2d.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/bias.h"
#include "meshlayout/kernels/separable_conv2d.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/layers/convolutional/conv_geometry.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {
SeparableConv2D::SeparableConv2D(int64_t filters, SeparableConv2DOptions options)
    : Layer("separable_conv2d", options.name), filters_(filters), options_(std::move(options)) {
  if (options_.depth_multiplier < 1) {
    throw ValueError(
        fmt::format("Invalid value for argument `depth_multiplier`. Expected a strictly positive "
                    "value. Received depth_multiplier={}.",
                    options_.depth_multiplier));
  }
  if (filters < 1) {
    throw ValueError(
        fmt::format("Invalid value for argument `filters`. Expected a strictly positive value. "
                    "Received filters={}.",
                    filters));
  }
  if (options_.kernel_size[0] < 1 || options_.kernel_size[1] < 1 || options_.strides[0] < 1 ||
      options_.strides[1] < 1) {
    throw ValueError(
        fmt::format("SeparableConv2D kernel_size and strides must be at least 1, got "
                    "kernel_size=({}, {}), strides=({}, {})",
                    options_.kernel_size[0], options_.kernel_size[1], options_.strides[0],
                    options_.strides[1]));
  }
  if (options_.padding != "valid" && options_.padding != "same") {
    throw ValueError(fmt::format("SeparableConv2D padding must be 'valid' or 'same', got {}",
                                 quote(options_.padding)));
  }
}

int64_t SeparableConv2D::out_extent(int64_t in, int d) const {
  return conv_out_extent(in, options_.kernel_size[static_cast<size_t>(d)],
                         options_.strides[static_cast<size_t>(d)], options_.padding == "same");
}

int64_t SeparableConv2D::pad_before(int64_t in, int d) const {
  return conv_pad_before(in, options_.kernel_size[static_cast<size_t>(d)],
                         options_.strides[static_cast<size_t>(d)], options_.padding == "same");
}

void SeparableConv2D::check_input(const Shape& input_shape) const {
  if (input_shape.size() != 4) {
    throw ValueError(
        fmt::format("SeparableConv2D layer {} takes NHWC inputs of rank 4, got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  if (depthwise_ && input_shape[3] != depthwise_->shape()[2]) {
    throw ValueError(fmt::format(
        "SeparableConv2D layer {} was built for {} input channels, got an input of shape {}",
        quote(name()), depthwise_->shape()[2], shape_to_string(input_shape)));
  }
}

Shape SeparableConv2D::compute_output_shape(const Shape& s) const {
  check_input(s);
  return {s[0], out_extent(s[1], 0), out_extent(s[2], 1), filters_};
}

void SeparableConv2D::build(const Shape& input_shape) {
  check_input(input_shape);
  const int64_t c = input_shape[3], m = options_.depth_multiplier;
  depthwise_ = add_weight({.name = "depthwise_kernel",
                           .shape = {options_.kernel_size[0], options_.kernel_size[1], c, m},
                           .initializer = options_.depthwise_initializer,
                           .regularizer = options_.depthwise_regularizer,
                           .layout = options_.depthwise_kernel_layout});
  pointwise_ = add_weight({.name = "pointwise_kernel",
                           .shape = {1, 1, c * m, filters_},
                           .initializer = options_.pointwise_initializer,
                           .regularizer = options_.pointwise_regularizer,
                           .layout = options_.pointwise_kernel_layout});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer,
                        .layout = options_.bias_layout});
  }
  internal_nn::check_compute_dtype("SeparableConv2D", name(), depthwise_->dtype());
}

Array SeparableConv2D::depthwise_input(const Array& x) const {
  const DeviceMesh& mesh = pointwise_->value().mesh();
  const DimSharding batch = x.mesh() == mesh ? x.layout().axes()[0] : DimSharding();
  return distribute_tensor(x, TensorLayout({batch, None, None, None}, mesh));
}

Array SeparableConv2D::depthwise(const Array& in) const {
  const Shape& xs = in.shape();
  const DepthwiseConv2DGeometry g{.H = xs[1],
                                  .W = xs[2],
                                  .C = xs[3],
                                  .M = options_.depth_multiplier,
                                  .kh = options_.kernel_size[0],
                                  .kw = options_.kernel_size[1],
                                  .sh = options_.strides[0],
                                  .sw = options_.strides[1],
                                  .OH = out_extent(xs[1], 0),
                                  .OW = out_extent(xs[2], 1),
                                  .top = pad_before(xs[1], 0),
                                  .left = pad_before(xs[2], 1)};
  const Array dk = distribute_tensor(depthwise_->value(), TensorLayout::replicated(4, in.mesh()));
  Array d =
      allocate_agreed(in.layout(), {xs[0], g.OH, g.OW, g.C * g.M}, in.dtype(), in.runtime_ptr());
  const DeviceKind kind = kind_of(d);
  d.runtime().pool().parallel_for(d.local_shards().size(), [&](size_t s) {
    Array::Shard& out = d.local_shards()[s];
    depthwise_conv2d_forward(kind, {.y = &out,
                                    .x = in.shard_at(out.position),
                                    .kernel = dk.shard_at(out.position),
                                    .g = g,
                                    .dtype = in.dtype()});
  });
  return d;
}

Array SeparableConv2D::pointwise_matrix(std::optional<Array>& storage) const {
  const Shape& ps = pointwise_->shape();
  return reshaped_view(pointwise_->value(), {ps[2], ps[3]}, storage);
}

Array SeparableConv2D::pointwise_plus_bias(const Array& d, const Array& pw) const {
  Array y = matmul(d, pw);
  if (bias_) {
    // Bias laid out like y's last dimension, so each device holds the filters it adds to.
    const Array b =
        distribute_tensor(bias_->value(), TensorLayout({y.layout().axes().back()}, y.mesh()));
    const DeviceKind kind = kind_of(y);
    y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
      Array::Shard& s = y.local_shards()[i];
      add_bias(kind, {.y = &s,
                      .bias = b.shard_at(s.position),
                      .inner = s.box.shape.back(),
                      .dtype = y.dtype()});
    });
  }
  return y;
}

Array SeparableConv2D::call(const Array& x) {
  check_input(x.shape());
  check_input_dtype("SeparableConv2D", name(), x.dtype(), depthwise_->dtype());
  std::optional<Array> pw_store;
  Array y = pointwise_plus_bias(depthwise(depthwise_input(x)), pointwise_matrix(pw_store));
  if (options_.activation == Activation::kLinear) return y;
  return apply_activation(options_.activation, std::move(y));
}

Array SeparableConv2D::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!depthwise_) {
    throw FailedPreconditionError(fmt::format(
        "SeparableConv2D layer {} is not built: call it before its backward", quote(name())));
  }
  check_input(x.shape());
  check_input_dtype("SeparableConv2D", name(), x.dtype(), depthwise_->dtype());
  const DType dtype = depthwise_->dtype();
  check_output_gradient(name(), dy, compute_output_shape(x.shape()), dtype);
  const Array in = depthwise_input(x);
  const DeviceMesh& mesh = in.mesh();
  const Array d = depthwise(in);
  std::optional<Array> pw_store;
  const Array pw = pointwise_matrix(pw_store);
  // dz = dy through the activation (z recomputed), on the layer's mesh.
  std::optional<Array> dz_store;
  if (options_.activation != Activation::kLinear) {
    dz_store.emplace(
        apply_activation_backward(options_.activation, pointwise_plus_bias(d, pw), dy));
  } else if (dy.mesh() != mesh) {
    dz_store.emplace(distribute_tensor(dy, TensorLayout::replicated(4, mesh)));
  }
  const Array& dz = dz_store ? *dz_store : dy;
  if (bias_ && bias_->trainable())
    grads.accumulate(*bias_, sum_over_leading(dz, 1, bias_->value().layout()));
  if (pointwise_->trainable()) {
    grads.accumulate(*pointwise_,
                     reshaped(matmul_backward_weight(d, dz, pw.layout()), pointwise_->shape()));
  }
  const Array dd = matmul_backward_input(dz, pw, d.layout());  // (B, OH, OW, C·M) in d's layout
  // The depthwise step's backward, per device for its images.
  const Shape& xs = x.shape();
  const DepthwiseConv2DGeometry g{.H = xs[1],
                                  .W = xs[2],
                                  .C = xs[3],
                                  .M = options_.depth_multiplier,
                                  .kh = options_.kernel_size[0],
                                  .kw = options_.kernel_size[1],
                                  .sh = options_.strides[0],
                                  .sw = options_.strides[1],
                                  .OH = out_extent(xs[1], 0),
                                  .OW = out_extent(xs[2], 1),
                                  .top = pad_before(xs[1], 0),
                                  .left = pad_before(xs[2], 1)};
  const Array dk = distribute_tensor(depthwise_->value(), TensorLayout::replicated(4, mesh));
  const bool train_depthwise = depthwise_->trainable();
  const TensorLayout batch_layout5({in.layout().axes()[0], None, None, None, None}, mesh);
  std::optional<Array> partials;  // (B, kh, kw, C, M): each image's share of d depthwise
  if (train_depthwise) {
    partials.emplace(
        allocate_agreed(batch_layout5, {xs[0], g.kh, g.kw, g.C, g.M}, dtype, in.runtime_ptr()));
  }
  Array dx = allocate_agreed(in.layout(), xs, dtype, in.runtime_ptr());
  const DeviceKind kind = kind_of(dx);
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t s) {
    Array::Shard& out = dx.local_shards()[s];
    depthwise_conv2d_backward(
        kind, {.dx = &out,
               .kernel_partials = partials ? partials->shard_at(out.position) : nullptr,
               .x = in.shard_at(out.position),
               .dy = dd.shard_at(out.position),
               .kernel = dk.shard_at(out.position),
               .g = g,
               .dtype = dtype});
  });
  if (partials) {
    // Σ over the images: a partial sum over the batch axes, completed by the collective.
    const Array& dk_value = depthwise_->value();
    if (dk_value.mesh() == mesh) {
      grads.accumulate(*depthwise_, sum_over_leading(*partials, 4, dk_value.layout()));
    } else {
      grads.accumulate(
          *depthwise_,
          distribute_tensor(sum_over_leading(*partials, 4, TensorLayout::replicated(4, mesh)),
                            dk_value.layout()));
    }
  }
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
