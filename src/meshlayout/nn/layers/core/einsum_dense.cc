#include "meshlayout/nn/layers/core/einsum_dense.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/array/array_view.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/bias.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"
#include "meshlayout/ops/permute.h"

namespace meshlayout {

Array contract_trailing(const Array& x, const Array& kernel, int contracted,
                        const Array* residual) {
  const int xr = static_cast<int>(x.shape().size()), wr = static_cast<int>(kernel.shape().size());
  if (contracted < 1 || contracted >= wr || contracted > xr ||
      !std::equal(x.shape().end() - contracted, x.shape().end(), kernel.shape().begin())) {
    throw ValueError(
        fmt::format("cannot contract the last {} dimensions of {} with the first of a "
                    "kernel {}",
                    contracted, shape_to_string(x.shape()), shape_to_string(kernel.shape())));
  }
  const Shape lead(x.shape().begin(), x.shape().end() - contracted);
  const Shape outer(kernel.shape().begin() + contracted, kernel.shape().end());
  const int64_t k = num_elements(kernel.shape()) / std::max<int64_t>(1, num_elements(outer));
  const int64_t n = num_elements(outer);
  Shape x2 = lead;
  x2.push_back(k);
  std::optional<Array> x_store, w_store, x_on_mesh;
  const Array* xs = &x;
  if (!(x.mesh() == kernel.mesh())) {  // an input on another mesh follows the kernel's
    x_on_mesh.emplace(distribute_tensor(x, TensorLayout::replicated(xr, kernel.mesh())));
    xs = &*x_on_mesh;
  }
  const Array xv = reshaped_view(*xs, x2, x_store);
  const Array wv = reshaped_view(kernel, {k, n}, w_store);
  Shape out = lead;
  out.insert(out.end(), outer.begin(), outer.end());
  if (residual != nullptr && residual->shape() != out) {
    throw ValueError(fmt::format("the residual {} does not have the product's shape {}",
                                 shape_to_string(residual->shape()), shape_to_string(out)));
  }
  if (residual != nullptr && outer.size() == 1 && residual->mesh() == kernel.mesh() &&
      residual->dtype() == kernel.dtype()) {
    return matmul(xv, wv, {.add_to_output = residual});
  }
  Array y = reshaped(matmul(xv, wv), out);
  if (residual != nullptr) return add(std::move(y), *residual);
  return y;
}

EinsumDense::EinsumDense(std::string equation, Shape output_shape, EinsumDenseOptions options)
    : Layer("einsum_dense", options.name),
      equation_(std::move(equation)),
      output_shape_(std::move(output_shape)),
      options_(std::move(options)) {
  const auto unsupported = [&](std::string_view why) {
    return ValueError(
        fmt::format("EinsumDense equation {} is not supported: {} (the kernel must "
                    "contract the input's trailing dimensions, as in "
                    "'btd,dnh->btnh' or 'btnh,nhd->btd')",
                    quote(equation_), why));
  };
  const size_t arrow = equation_.find("->"), comma = equation_.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow) {
    throw unsupported("expected '<input>,<kernel>-><output>'");
  }
  input_spec_ = equation_.substr(0, comma);
  kernel_spec_ = equation_.substr(comma + 1, arrow - comma - 1);
  output_spec_ = equation_.substr(arrow + 2);
  const bool ellipsis = input_spec_.starts_with("...") && output_spec_.starts_with("...");
  if (ellipsis) {
    input_spec_ = input_spec_.substr(3);
    output_spec_ = output_spec_.substr(3);
  }
  for (const std::string* s : {&input_spec_, &kernel_spec_, &output_spec_}) {
    if (s->empty() ||
        !std::all_of(s->begin(), s->end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
      throw unsupported("each spec must be lowercase letters");
    }
  }
  while (
      contracted_ < static_cast<int>(std::min(input_spec_.size(), kernel_spec_.size())) &&
      kernel_spec_.find(input_spec_[input_spec_.size() - 1 - static_cast<size_t>(contracted_)]) !=
          std::string::npos) {
    ++contracted_;
  }
  const std::string prefix =
      input_spec_.substr(0, input_spec_.size() - static_cast<size_t>(contracted_));
  const std::string contracted = input_spec_.substr(prefix.size());
  if (contracted_ == 0) throw unsupported("no trailing letter of the input is in the kernel");
  // The kernel's other letters, in the order the output has them after the input's prefix.
  std::string kernel_free;
  for (const char c : kernel_spec_) {
    if (contracted.find(c) == std::string::npos) kernel_free += c;
  }
  const std::string free =
      output_spec_.starts_with(prefix) ? output_spec_.substr(prefix.size()) : std::string();
  if (kernel_free.empty() || free.size() != kernel_free.size() ||
      !std::is_permutation(free.begin(), free.end(), kernel_free.begin()) ||
      kernel_spec_.size() != contracted.size() + kernel_free.size()) {
    throw unsupported(
        fmt::format("the output must be {} followed by the kernel's letters {} in some order",
                    quote(prefix), quote(kernel_free)));
  }
  // The kernel as the product reads it: contracted letters first (in the input's order), then
  // the output's. When the kernel is stored otherwise (Gemma's "btd,ndh->btnh": kernel
  // (heads, d, head_dim)), each call permutes it (ops/permute.h) to that order.
  const std::string product_spec = contracted + free;
  for (const char c : product_spec) kernel_perm_.push_back(static_cast<int>(kernel_spec_.find(c)));
  bool identity = true;
  for (size_t i = 0; i < kernel_perm_.size(); ++i)
    identity = identity && kernel_perm_[i] == static_cast<int>(i);
  if (identity) kernel_perm_.clear();
  const size_t expected = ellipsis ? output_spec_.size() : output_spec_.size() - 1;
  if (output_shape_.size() != expected) {
    throw ValueError(
        fmt::format("EinsumDense {}: output_shape {} must have {} entries (the output "
                    "{} without its {})",
                    quote(equation_), shape_to_string(output_shape_), expected, quote(output_spec_),
                    ellipsis ? "ellipsis" : "batch dimension"));
  }
  for (size_t i = output_shape_.size() - free.size(); i < output_shape_.size(); ++i) {
    if (output_shape_[i] < 1) {
      throw ValueError(
          fmt::format("EinsumDense {}: output_shape {} must give the kernel's output "
                      "sizes ({}) as positive numbers",
                      quote(equation_), shape_to_string(output_shape_), quote(free)));
    }
  }
  if (!options_.bias_axes.empty() &&
      (!output_spec_.ends_with(options_.bias_axes) || options_.bias_axes.size() > free.size())) {
    throw ValueError(
        fmt::format("EinsumDense {}: bias_axes {} must be trailing letters of the "
                    "kernel's output {}",
                    quote(equation_), quote(options_.bias_axes), quote(free)));
  }
}

Shape EinsumDense::compute_output_shape(const Shape& input_shape) const {
  if (input_shape.size() < input_spec_.size() ||
      (!equation_.starts_with("...") && input_shape.size() != input_spec_.size())) {
    throw ValueError(fmt::format("EinsumDense layer {} ({}) needs inputs of rank {}, got shape {}",
                                 quote(name()), quote(equation_), input_spec_.size(),
                                 shape_to_string(input_shape)));
  }
  Shape out(input_shape.begin(), input_shape.end() - contracted_);
  const size_t free = kernel_spec_.size() - static_cast<size_t>(contracted_);
  out.insert(out.end(), output_shape_.end() - static_cast<int64_t>(free), output_shape_.end());
  return out;
}

void EinsumDense::build(const Shape& input_shape) {
  const Shape out = compute_output_shape(input_shape);
  Shape kernel_shape(input_shape.end() - contracted_, input_shape.end());
  const size_t free = kernel_spec_.size() - static_cast<size_t>(contracted_);
  kernel_shape.insert(kernel_shape.end(), out.end() - static_cast<int64_t>(free), out.end());
  if (!kernel_perm_.empty()) {  // stored in the equation's order: product dim i is dim perm[i]
    Shape stored(kernel_shape.size());
    for (size_t i = 0; i < kernel_perm_.size(); ++i) {
      stored[static_cast<size_t>(kernel_perm_[i])] = kernel_shape[i];
    }
    kernel_shape = stored;
  }
  kernel_ = add_weight({.name = "kernel",
                        .shape = kernel_shape,
                        .initializer = options_.kernel_initializer,
                        .layout = options_.kernel_layout});
  if (!options_.bias_axes.empty()) {
    const Shape bias_shape(out.end() - static_cast<int64_t>(options_.bias_axes.size()), out.end());
    bias_ = add_weight({.name = "bias",
                        .shape = bias_shape,
                        .initializer = options_.bias_initializer,
                        .layout = options_.bias_layout});
  }
}

void EinsumDense::enable_lora(int64_t rank, std::optional<double> lora_alpha,
                              Initializer a_initializer, Initializer b_initializer) {
  if (!kernel_perm_.empty()) {
    throw ValueError(fmt::format(
        "EinsumDense layer {} ({}): LoRA needs a kernel whose contracted letters come first "
        "(as 'btd,dnh->btnh'); this kernel is {}",
        quote(name()), quote(equation_), quote(kernel_spec_)));
  }
  lora_ = add_lora_weights(kernel_, lora_, rank, lora_alpha, a_initializer, b_initializer,
                           std::nullopt);
}

const Array& EinsumDense::effective_kernel(std::optional<Array>& storage) const {
  if (!kernel_perm_.empty()) return storage.emplace(permute_dims(kernel_->value(), kernel_perm_));
  if (!lora_.enabled()) return kernel_->value();
  // kernel + (alpha / rank) · A @ B, in the kernel's layout
  return storage.emplace(lora_effective_kernel(kernel_->value(), lora_));
}

Array EinsumDense::call(const Array& x) {
  std::optional<Array> effective;
  Array y = pre_activation(x, effective_kernel(effective));
  if (options_.activation == Activation::kLinear) return y;
  return apply_activation(options_.activation, std::move(y));
}

Array EinsumDense::call_plus(const Array& x, const Array& residual) {
  NameScope scope = open_name_scope();
  maybe_build(x.shape());
  std::optional<Array> effective;
  if (options_.activation != Activation::kLinear) {
    return add(
        apply_activation(options_.activation, pre_activation(x, effective_kernel(effective))),
        residual);
  }
  return pre_activation(x, effective_kernel(effective), &residual);
}

Array EinsumDense::pre_activation(const Array& x, const Array& kernel,
                                  const Array* residual) const {
  check_input_dtype("EinsumDense", name(), x.dtype(), kernel.dtype());
  Array y = contract_trailing(x, kernel, contracted_, residual);
  if (bias_) {
    const int rank = static_cast<int>(y.shape().size());
    const int nb = static_cast<int>(bias_->shape().size());
    std::vector<DimSharding> axes(y.layout().axes().end() - nb, y.layout().axes().end());
    const Array b = distribute_tensor(bias_->value(), TensorLayout(axes, y.mesh()));
    const DeviceKind kind = kind_of(y);
    y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
      Array::Shard& s = y.local_shards()[i];
      const int64_t inner =
          num_elements(Shape(s.box.shape.begin() + (rank - nb), s.box.shape.end()));
      add_bias(kind, {.y = &s, .bias = b.shard_at(s.position), .inner = inner, .dtype = y.dtype()});
    });
  }
  return y;
}

Array EinsumDense::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!kernel_) {
    throw FailedPreconditionError(
        fmt::format("EinsumDense layer {} is not built: call it before its "
                    "backward",
                    quote(name())));
  }
  // The kernel's shape as the product reads it (permuted when stored in another order).
  Shape ks = kernel_->shape();
  for (size_t i = 0; i < kernel_perm_.size(); ++i) {
    ks[i] = kernel_->shape()[static_cast<size_t>(kernel_perm_[i])];
  }
  const int xr = static_cast<int>(x.shape().size());
  const DType dtype = kernel_->dtype();
  if (x.dtype() != dtype || xr < contracted_ ||
      !std::equal(x.shape().end() - contracted_, x.shape().end(), ks.begin())) {
    throw ValueError(
        fmt::format("backward of EinsumDense layer {} ({}): x must be {} (the kernel's "
                    "dtype) ending in the kernel's contracted sizes {}, got {} {}",
                    quote(name()), quote(equation_), dtype_name(dtype),
                    shape_to_string(Shape(ks.begin(), ks.begin() + contracted_)),
                    dtype_name(x.dtype()), shape_to_string(x.shape())));
  }
  check_output_gradient(name(), dy, compute_output_shape(x.shape()), dtype);
  std::optional<Array> effective;
  const Array& kernel = effective_kernel(effective);
  const DeviceMesh& mesh = kernel.mesh();
  // x and dy on the kernel's mesh, as the call runs.
  std::optional<Array> x_on, dy_on, dz_store;
  const Array& xk =
      x.mesh() == mesh ? x : x_on.emplace(distribute_tensor(x, TensorLayout::replicated(xr, mesh)));
  if (options_.activation != Activation::kLinear) {
    dz_store.emplace(apply_activation_backward(options_.activation, pre_activation(x, kernel), dy));
  }
  const Array& dz =
      dz_store ? *dz_store
      : dy.mesh() == mesh
          ? dy
          : dy_on.emplace(distribute_tensor(
                dy, TensorLayout::replicated(static_cast<int>(dy.shape().size()), mesh)));
  // The product as (P…, K) · (K, N) → (P…, N), as contract_trailing runs it.
  Shape x2(x.shape().begin(), x.shape().end() - contracted_), dz2 = x2;
  const int64_t k = num_elements(Shape(ks.begin(), ks.begin() + contracted_));
  const int64_t n = num_elements(ks) / std::max<int64_t>(1, k);
  x2.push_back(k);
  dz2.push_back(n);
  std::optional<Array> x_store, w_store, dz_view_store;
  const Array xv = reshaped_view(xk, x2, x_store);
  const Array wv = reshaped_view(kernel, {k, n}, w_store);
  const Array dzv = reshaped_view(dz, dz2, dz_view_store);
  if (kernel_->trainable() || lora_.enabled()) {
    Array dk = reshaped(matmul_backward_weight(xv, dzv, wv.layout()), ks);
    if (!kernel_perm_.empty()) {  // back to the stored order, in the kernel's layout
      dk = permute_dims(dk, inverse_permutation(kernel_perm_));
      if (dk.layout() != kernel_->value().layout()) {
        dk = distribute_tensor(dk, kernel_->value().layout());
      }
    }
    // K + s·A@B: dA = s · dK·Bᵀ, dB = s · Aᵀ·dK
    if (lora_.enabled()) accumulate_lora_gradients(dk, lora_, grads);
    if (kernel_->trainable()) grads.accumulate(*kernel_, std::move(dk));
  }
  if (bias_ && bias_->trainable()) {
    grads.accumulate(*bias_, sum_over_leading(dz, static_cast<int>(bias_->shape().size()),
                                              bias_->value().layout()));
  }
  Array dx = reshaped(matmul_backward_input(dzv, wv, xv.layout()), x.shape());
  if (dx.layout() == x.layout()) return dx;
  return distribute_tensor(dx, x.layout());
}

}  // namespace meshlayout
