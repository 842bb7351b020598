// activation.cc — see activation.h: the activations' forward and backward.
#include "meshlayout/nn/layers/activations/activation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {

Activation parse_activation(std::string_view name) {
  if (name == "linear" || name.empty()) return Activation::kLinear;
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "softmax") return Activation::kSoftmax;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  throw ValueError(
      fmt::format("unknown activation {}; expected one of 'linear', 'relu', "
                  "'gelu', 'tanh', 'softmax', 'silu'",
                  quote(name)));
}

namespace {

// Applies `activation` to y's local shards in place (softmax: y's last dimension is whole), in
// E: float (F32, as before F64 existed) or double (F64).
template <typename E>
void activate_in_place(Activation activation, Array& y) {
  const int64_t row = y.shape().empty() ? 1 : y.shape().back();
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const int64_t n = s.box.num_elements();
    switch (activation) {
      case Activation::kRelu:
        for (int64_t k = 0; k < n; ++k) p[k] = p[k] > 0 ? p[k] : E(0);
        break;
      case Activation::kTanh:
        for (int64_t k = 0; k < n; ++k) p[k] = std::tanh(p[k]);
        break;
      case Activation::kGelu:  // exact GELU, as keras.activations.gelu(approximate=False)
        for (int64_t k = 0; k < n; ++k) {
          p[k] = static_cast<E>(0.5 * p[k] * (1.0 + std::erf(p[k] / std::sqrt(2.0))));
        }
        break;
      case Activation::kSoftmax:
        for (int64_t r = 0; row > 0 && r < n / row; ++r) {
          E* v = p + r * row;
          E m = v[0];
          for (int64_t k = 1; k < row; ++k) m = std::max(m, v[k]);
          double sum = 0;
          for (int64_t k = 0; k < row; ++k) sum += (v[k] = std::exp(v[k] - m));
          for (int64_t k = 0; k < row; ++k) v[k] = static_cast<E>(v[k] / sum);
        }
        break;
      case Activation::kSilu:  // x · sigmoid(x) in E (float, as keras-hub runs it in fp32)
        for (int64_t k = 0; k < n; ++k) p[k] = p[k] / (E(1) + std::exp(-p[k]));
        break;
      case Activation::kLinear:
        break;
    }
  });
}

void activate_in_place(Activation activation, Array& y) {
  if (activation == Activation::kLinear) return;
  if (y.dtype() == DType::kF32) {
    activate_in_place<float>(activation, y);
  } else {
    activate_in_place<double>(activation, y);
  }
}

void check_activation_dtype(Activation activation, const Array& x) {
  if (activation != Activation::kLinear && x.dtype() != DType::kF32 && x.dtype() != DType::kF64) {
    throw ValueError(
        fmt::format("activations run on F32 or F64 tensors, got {}", dtype_name(x.dtype())));
  }
}

// Softmax needs whole rows: the layout with the last dimension gathered if it is split.
TensorLayout activation_layout(Activation activation, const Array& x) {
  TensorLayout layout = x.layout();
  if (activation == Activation::kSoftmax && layout.rank() > 0 &&
      layout.axes().back().is_sharded()) {
    std::vector<DimSharding> axes = layout.axes();
    axes.back() = DimSharding();
    layout = TensorLayout(axes, x.mesh());
  }
  return layout;
}

}  // namespace

Array apply_activation(Activation activation, const Array& x) {
  check_activation_dtype(activation, x);
  Array y = distribute_tensor(x, activation_layout(activation, x));
  activate_in_place(activation, y);
  return y;
}

Array apply_activation(Activation activation, Array&& x) {
  check_activation_dtype(activation, x);
  const TensorLayout layout = activation_layout(activation, x);
  if (layout != x.layout()) return apply_activation(activation, static_cast<const Array&>(x));
  Array y = std::move(x);
  activate_in_place(activation, y);
  return y;
}

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

}  // namespace meshlayout
