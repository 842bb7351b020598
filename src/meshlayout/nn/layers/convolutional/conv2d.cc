#include "meshlayout/nn/layers/convolutional/conv2d.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/bias.h"
#include "meshlayout/kernels/conv2d.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/layers/convolutional/conv_geometry.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {

Conv2D::Conv2D(int64_t filters, Conv2DOptions options)
    : Layer("conv2d", options.name), filters_(filters), options_(std::move(options)) {
  if (filters < 1)
    throw ValueError(fmt::format("Conv2D filters must be at least 1, got {}", filters));
  for (int d = 0; d < 2; ++d) {
    if (options_.kernel_size[static_cast<size_t>(d)] < 1 ||
        options_.strides[static_cast<size_t>(d)] < 1) {
      throw ValueError(fmt::format(
          "Conv2D kernel_size and strides must be at least 1, got kernel_size=({}, {}), "
          "strides=({}, {})",
          options_.kernel_size[0], options_.kernel_size[1], options_.strides[0],
          options_.strides[1]));
    }
  }
  if (options_.padding != "valid" && options_.padding != "same") {
    throw ValueError(
        fmt::format("Conv2D padding must be 'valid' or 'same', got {}", quote(options_.padding)));
  }
}

int64_t Conv2D::out_extent(int64_t in, int d) const {
  return conv_out_extent(in, options_.kernel_size[static_cast<size_t>(d)],
                         options_.strides[static_cast<size_t>(d)], options_.padding == "same");
}

int64_t Conv2D::pad_before(int64_t in, int d) const {
  return conv_pad_before(in, options_.kernel_size[static_cast<size_t>(d)],
                         options_.strides[static_cast<size_t>(d)], options_.padding == "same");
}

void Conv2D::check_input(const Shape& input_shape) const {
  if (input_shape.size() != 4) {
    throw ValueError(fmt::format("Conv2D layer {} takes NHWC inputs of rank 4, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  if (kernel_ && input_shape[3] != kernel_->shape()[2]) {
    throw ValueError(
        fmt::format("Conv2D layer {} was built for {} input channels, got an input of shape {}",
                    quote(name()), kernel_->shape()[2], shape_to_string(input_shape)));
  }
}

Shape Conv2D::compute_output_shape(const Shape& s) const {
  check_input(s);
  return {s[0], out_extent(s[1], 0), out_extent(s[2], 1), filters_};
}

void Conv2D::build(const Shape& input_shape) {
  check_input(input_shape);
  kernel_ = add_weight(
      {.name = "kernel",
       .shape = {options_.kernel_size[0], options_.kernel_size[1], input_shape[3], filters_},
       .initializer = options_.kernel_initializer,
       .regularizer = options_.kernel_regularizer,
       .layout = options_.kernel_layout});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer,
                        .layout = options_.bias_layout});
  }
  internal_nn::check_compute_dtype("Conv2D", name(), kernel_->dtype());
}

DimSharding Conv2D::batch_axes_for(const Array& x) const {
  const Array& kernel_value = kernel_->value();
  const DimSharding filter_axes = kernel_value.layout().axes()[3];
  // The input keeps its batch split when it is on the kernel's mesh and the split uses no
  // filter axis; everything else is gathered.
  if (x.mesh() != kernel_value.mesh()) return DimSharding();
  const DimSharding& batch_axes = x.layout().axes()[0];
  for (const std::string& a : batch_axes.axes()) {
    for (const std::string& f : filter_axes.axes()) {
      if (a == f) return DimSharding();
    }
  }
  return batch_axes;
}

void Conv2D::check_call_input(const Array& x) const {
  check_input(x.shape());
  check_input_dtype("Conv2D", name(), x.dtype(), kernel_->dtype());
}

void Conv2D::enable_lora(int64_t rank, std::optional<double> lora_alpha,
                         const Initializer& a_initializer, const Initializer& b_initializer) {
  lora_ = add_lora_weights(kernel_, lora_, rank, lora_alpha, a_initializer, b_initializer,
                           options_.kernel_regularizer);
}

const Array& Conv2D::effective_kernel(std::optional<Array>& storage) const {
  if (!lora_.enabled()) return kernel_->value();
  return storage.emplace(lora_effective_kernel(kernel_->value(), lora_));
}

Array Conv2D::pre_activation(const Array& x, const Array& kernel_value) const {
  const DeviceMesh& mesh = kernel_value.mesh();
  const DimSharding filter_axes = kernel_value.layout().axes()[3];
  const DimSharding batch_axes = batch_axes_for(x);
  Array k = distribute_tensor(kernel_value, TensorLayout({None, None, None, filter_axes}, mesh));
  Array in = distribute_tensor(x, TensorLayout({batch_axes, None, None, None}, mesh));
  const Shape out_shape = compute_output_shape(x.shape());
  const DType dtype = kernel_value.dtype();
  Array y = Array::allocate(TensorLayout({batch_axes, None, None, filter_axes}, mesh), out_shape,
                            dtype, in.runtime_ptr());
  const Conv2DGeometry g{.H = x.shape()[1],
                         .W = x.shape()[2],
                         .C = x.shape()[3],
                         .kh = options_.kernel_size[0],
                         .kw = options_.kernel_size[1],
                         .sh = options_.strides[0],
                         .sw = options_.strides[1],
                         .OH = out_shape[1],
                         .OW = out_shape[2],
                         .top = pad_before(x.shape()[1], 0),
                         .left = pad_before(x.shape()[2], 1)};
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& out = y.local_shards()[i];
    conv2d_forward(kind, {.y = &out,
                          .x = in.shard_at(out.position),
                          .kernel = k.shard_at(out.position),
                          .g = g,
                          .dtype = dtype});
  });
  if (bias_) {
    Array bias = distribute_tensor(bias_->value(), TensorLayout({filter_axes}, mesh));
    y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
      Array::Shard& s = y.local_shards()[i];
      add_bias(
          kind,
          {.y = &s, .bias = bias.shard_at(s.position), .inner = s.box.shape[3], .dtype = dtype});
    });
  }
  return y;
}

Array Conv2D::call(const Array& x) {
  check_call_input(x);
  std::optional<Array> effective;
  Array y = pre_activation(x, effective_kernel(effective));
  if (options_.activation == Activation::kLinear) return y;
  return apply_activation(options_.activation, std::move(y));
}

Array Conv2D::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!kernel_) {
    throw FailedPreconditionError(
        fmt::format("Conv2D layer {} is not built: call it before its backward", quote(name())));
  }
  check_call_input(x);
  const Shape out_shape = compute_output_shape(x.shape());
  check_output_gradient(name(), dy, out_shape, x.dtype());
  std::optional<Array> effective;
  const Array& kernel_value = effective_kernel(effective);
  const DType dtype = kernel_value.dtype();
  const DeviceMesh& mesh = kernel_value.mesh();
  const DimSharding filter_axes = kernel_value.layout().axes()[3];
  const DimSharding batch_axes = batch_axes_for(x);
  const DeviceKind kind = kind_of(kernel_value);
  const TensorLayout out_layout({batch_axes, None, None, filter_axes}, mesh);
  const TensorLayout in_layout4({batch_axes, None, None, None}, mesh);
  // dz = dy through the activation (z recomputed), in the call's output layout.
  std::optional<Array> dz_store;
  const Array& dz = options_.activation == Activation::kLinear
                        ? in_layout(dy, out_layout, dz_store)
                        : dz_store.emplace(apply_activation_backward(
                              options_.activation, pre_activation(x, kernel_value), dy));
  if (bias_ && bias_->trainable())
    grads.accumulate(*bias_, sum_over_leading(dz, 1, bias_->value().layout()));
  const Conv2DGeometry g{.H = x.shape()[1],
                         .W = x.shape()[2],
                         .C = x.shape()[3],
                         .kh = options_.kernel_size[0],
                         .kw = options_.kernel_size[1],
                         .sh = options_.strides[0],
                         .sw = options_.strides[1],
                         .OH = out_shape[1],
                         .OW = out_shape[2],
                         .top = pad_before(x.shape()[1], 0),
                         .left = pad_before(x.shape()[2], 1)};
  const int64_t patch = g.patch(), filters = filters_;
  const Shape columns_shape{x.shape()[0], g.OH, g.OW, patch};
  // The kernel as the (patch, filters) matrix of the im2col product.
  std::optional<Array> k_store;
  const Array k =
      distribute_tensor(kernel_value, TensorLayout({None, None, None, filter_axes}, mesh));
  const Array k2 = reshaped_view(k, {patch, filters}, k_store);
  if (kernel_->trainable() || lora_.enabled()) {
    // d kernel = columnsᵀ · dz over every image and position: a partial sum over the batch
    // axes, completed by matmul_backward_weight's collective.
    const Array in = distribute_tensor(x, in_layout4);
    Array columns = allocate_agreed(in_layout4, columns_shape, dtype, in.runtime_ptr());
    columns.runtime().pool().parallel_for(columns.local_shards().size(), [&](size_t i) {
      Array::Shard& s = columns.local_shards()[i];
      conv2d_unfold(kind, {.columns = &s, .x = in.shard_at(s.position), .g = g, .dtype = dtype});
    });
    Array dk =
        reshaped(matmul_backward_weight(columns, dz, TensorLayout({None, filter_axes}, mesh)),
                 kernel_->shape());
    if (lora_.enabled()) accumulate_lora_gradients(dk, lora_, grads);  // the frozen kernel: nothing
    if (kernel_->trainable()) grads.accumulate(*kernel_, std::move(dk));
  }
  // d columns = dz · kernelᵀ (a partial sum over the filter axes, reduced by matmul), then
  // col2im adds each patch element back to the input element it was read from.
  const Array dcols = matmul_backward_input(dz, k2, in_layout4);
  Array dx = allocate_agreed(in_layout4, x.shape(), dtype, dcols.runtime_ptr());
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    conv2d_fold(kind, {.dx = &s, .columns = dcols.shard_at(s.position), .g = g, .dtype = dtype});
  });
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
