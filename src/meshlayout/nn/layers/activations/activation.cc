// activation.cc — see activation.h: the activations' forward and backward.
#include "meshlayout/nn/layers/activations/activation.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/activation.h"
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

// The kernels' name of `activation`.
ActivationFunction kernel_function(Activation activation) {
  switch (activation) {
    case Activation::kRelu:
      return ActivationFunction::kRelu;
    case Activation::kGelu:
      return ActivationFunction::kGelu;
    case Activation::kTanh:
      return ActivationFunction::kTanh;
    case Activation::kSoftmax:
      return ActivationFunction::kSoftmax;
    case Activation::kSilu:
      return ActivationFunction::kSilu;
    case Activation::kLinear:
      break;
  }
  return ActivationFunction::kLinear;
}

// Applies `activation` to y's local shards in place (softmax: y's last dimension is whole), in
// y's dtype (F32 or F64).
void activate_in_place(Activation activation, Array& y) {
  if (activation == Activation::kLinear) return;
  const ActivationFunction function = kernel_function(activation);
  const int64_t row = y.shape().empty() ? 1 : y.shape().back();
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    activation_forward(
        kind, {.y = &y.local_shards()[i], .function = function, .row = row, .dtype = y.dtype()});
  });
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

// dz = dy · f'(z) in place in `g` (holding dy), z in the same layout; softmax rows whole.
void activation_backward_in_place(Activation activation, const Array& z, Array& g) {
  if (activation == Activation::kLinear) return;  // dz = dy
  const ActivationFunction function = kernel_function(activation);
  const int64_t row = z.shape().empty() ? 1 : z.shape().back();
  const DeviceKind kind = kind_of(g);
  g.runtime().pool().parallel_for(g.local_shards().size(), [&](size_t i) {
    Array::Shard& s = g.local_shards()[i];
    activation_backward(kind, {.g = &s,
                               .z = z.shard_at(s.position),
                               .function = function,
                               .row = row,
                               .dtype = g.dtype()});
  });
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
