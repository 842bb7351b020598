// dense_backward.cc — the backward of the activations and of Dense, whose forwards are in
// layer.cc (split off to keep layer.cc short); declared beside them in layer.h.
#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {
namespace {

// dz = dy · f'(z) in place in `g` (holding dy), z in the same layout; softmax rows whole. E: float
// (F32) or double (F64), the element type of z and g; the derivatives in double either way.
template <typename E>
void activation_backward_in_place(Activation activation, const Array& z, Array& g) {
  const int64_t row = z.shape().empty() ? 1 : z.shape().back();
  g.runtime().pool().parallel_for(g.local_shards().size(), [&](size_t i) {
    Array::Shard& s = g.local_shards()[i];
    E* d = reinterpret_cast<E*>(s.buffer.data());
    const E* v = reinterpret_cast<const E*>(z.shard_at(s.position)->buffer.data());
    const int64_t n = s.box.num_elements();
    switch (activation) {
      case Activation::kRelu:
        for (int64_t k = 0; k < n; ++k) d[k] = v[k] > 0 ? d[k] : E(0);
        break;
      case Activation::kTanh:
        for (int64_t k = 0; k < n; ++k) {
          const double t = std::tanh(static_cast<double>(v[k]));
          d[k] = static_cast<E>(d[k] * (1.0 - t * t));
        }
        break;
      case Activation::kGelu:  // exact GELU: Φ(z) + z·φ(z)
        for (int64_t k = 0; k < n; ++k) {
          const double x = v[k];
          const double cdf = 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2));
          const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
          d[k] = static_cast<E>(d[k] * (cdf + x * pdf));
        }
        break;
      case Activation::kSilu:
        for (int64_t k = 0; k < n; ++k) {
          const double x = v[k], sig = 1.0 / (1.0 + std::exp(-x));
          d[k] = static_cast<E>(d[k] * sig * (1.0 + x * (1.0 - sig)));
        }
        break;
      case Activation::kSoftmax:
        for (int64_t r = 0; row > 0 && r < n / row; ++r) {
          const E* zr = v + r * row;
          E* dr = d + r * row;
          double m = zr[0];
          for (int64_t k = 1; k < row; ++k) m = std::max(m, static_cast<double>(zr[k]));
          double sum = 0;
          for (int64_t k = 0; k < row; ++k) sum += std::exp(zr[k] - m);
          double dot = 0;  // Σ dy·y
          for (int64_t k = 0; k < row; ++k) dot += dr[k] * (std::exp(zr[k] - m) / sum);
          for (int64_t k = 0; k < row; ++k) {
            dr[k] = static_cast<E>(std::exp(zr[k] - m) / sum * (dr[k] - dot));
          }
        }
        break;
      case Activation::kLinear:
        break;
    }
  });
}

void activation_backward_in_place(Activation activation, const Array& z, Array& g) {
  if (g.dtype() == DType::kF32) {
    activation_backward_in_place<float>(activation, z, g);
  } else {
    activation_backward_in_place<double>(activation, z, g);
  }
}

}  // namespace

Array apply_activation_backward(Activation activation, const Array& z, const Array& dy) {
  if (z.shape() != dy.shape() || (z.dtype() != DType::kF32 && z.dtype() != DType::kF64) ||
      dy.dtype() != z.dtype()) {
    throw ValueError(
        fmt::format("apply_activation_backward: z and dy must be of one shape and one "
                    "dtype, F32 or F64, got "
                    "z {} {} and dy {} {}",
                    dtype_name(z.dtype()), shape_to_string(z.shape()), dtype_name(dy.dtype()),
                    shape_to_string(dy.shape())));
  }
  // As the forward: softmax needs whole rows, the others run in z's layout.
  TensorLayout layout = z.layout();
  if (activation == Activation::kSoftmax && layout.rank() > 0 &&
      layout.axes().back().is_sharded()) {
    std::vector<DimSharding> axes = layout.axes();
    axes.back() = DimSharding();
    layout = TensorLayout(axes, z.mesh());
  }
  std::optional<Array> z_moved;
  const Array& zl = in_layout(z, layout, z_moved);
  Array g = distribute_tensor(dy, layout);  // a fresh array, overwritten with dz
  activation_backward_in_place(activation, zl, g);
  if (g.layout() == z.layout()) return g;
  return distribute_tensor(g, z.layout());
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
