// dense.cc — see dense.h: Dense's forward and backward.
#include "meshlayout/nn/layers/core/dense.h"

#include <fmt/format.h>

#include <optional>
#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/bias.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/lora.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {

Dense::Dense(int64_t units, DenseOptions options)
    : Layer("dense", options.name), units_(units), options_(std::move(options)) {
  if (units < 1) throw ValueError(fmt::format("Dense units must be at least 1, got {}", units));
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.back() = units_;
  return out;
}

void Dense::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("Dense layer {} needs inputs of rank >= 1, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  kernel_ = add_weight({.name = "kernel",
                        .shape = {input_shape.back(), units_},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer,
                        .layout = options_.kernel_layout});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {units_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer,
                        .layout = options_.bias_layout});
  }
}

const Array& Dense::on_kernel_mesh(const Array& x, std::optional<Array>& storage) const {
  const DeviceMesh& mesh = kernel_->value().mesh();
  if (x.mesh() == mesh) return x;
  // An input on another mesh of the same devices follows the kernel's mesh.
  return storage.emplace(
      distribute_tensor(x, TensorLayout::replicated(static_cast<int>(x.shape().size()), mesh)));
}

void Dense::enable_lora(int64_t rank, std::optional<double> lora_alpha,
                        const Initializer& a_initializer, const Initializer& b_initializer) {
  lora_ = add_lora_weights(kernel_, lora_, rank, lora_alpha, a_initializer, b_initializer,
                           options_.kernel_regularizer);
}

const Array& Dense::effective_kernel(std::optional<Array>& storage) const {
  if (!lora_.enabled()) return kernel_->value();
  return storage.emplace(lora_effective_kernel(kernel_->value(), lora_));
}

Array Dense::call(const Array& x) {
  std::optional<Array> effective;
  Array y = pre_activation(x, effective_kernel(effective));
  if (options_.activation == Activation::kLinear) return y;
  return apply_activation(options_.activation, std::move(y));
}

Array Dense::pre_activation(const Array& x, const Array& kernel) const {
  check_input_dtype("Dense", name(), x.dtype(), kernel.dtype());
  std::optional<Array> moved;
  Array y = matmul(on_kernel_mesh(x, moved), kernel);
  if (bias_) {
    // Bias laid out like y's last dimension, so each device holds the columns it adds to.
    Array b = distribute_tensor(bias_->value(), TensorLayout({y.layout().axes().back()}, y.mesh()));
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

Array Dense::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!kernel_) {
    throw FailedPreconditionError(
        fmt::format("Dense layer {} is not built: call it before its backward", quote(name())));
  }
  const DType dtype = kernel_->dtype();
  if (x.dtype() != dtype || x.shape().empty() || x.shape().back() != kernel_->shape()[0]) {
    throw ValueError(
        fmt::format("backward of Dense layer {}: x must be {} (…, {}) (the kernel's dtype), "
                    "got {} {}",
                    quote(name()), dtype_name(dtype), kernel_->shape()[0], dtype_name(x.dtype()),
                    shape_to_string(x.shape())));
  }
  check_output_gradient(name(), dy, compute_output_shape(x.shape()), dtype);
  std::optional<Array> effective;
  const Array& kernel = effective_kernel(effective);
  std::optional<Array> moved;
  const Array& xk = on_kernel_mesh(x, moved);
  std::optional<Array> dz_store;
  if (options_.activation != Activation::kLinear) {
    dz_store.emplace(apply_activation_backward(options_.activation, pre_activation(x, kernel), dy));
  }
  std::optional<Array> dy_on_mesh;
  const Array& dz = dz_store
                        ? *dz_store
                        : (dy.mesh() == kernel.mesh()
                               ? dy
                               : dy_on_mesh.emplace(distribute_tensor(
                                     dy, TensorLayout::replicated(
                                             static_cast<int>(dy.shape().size()), kernel.mesh()))));
  if (kernel_->trainable() || lora_.enabled()) {
    Array dk = matmul_backward_weight(xk, dz, kernel.layout());
    if (lora_.enabled()) accumulate_lora_gradients(dk, lora_, grads);  // the frozen kernel: nothing
    if (kernel_->trainable()) grads.accumulate(*kernel_, std::move(dk));
  }
  if (bias_ && bias_->trainable()) {
    grads.accumulate(*bias_, sum_over_leading(dz, 1, bias_->value().layout()));
  }
  Array dx = matmul_backward_input(dz, kernel, xk.layout());
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
