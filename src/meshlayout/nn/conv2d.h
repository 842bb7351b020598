// conv2d.h — keras.layers.Conv2D on distributed arrays: NHWC input, kernel
// (kh, kw, in_channels, filters), bias (filters,), strides, "valid" or "same" padding.
//
// Sharding: the input is laid out split on its batch dimension only (its batch split is kept,
// H, W and C are gathered), the kernel split on its filters dimension only (its filters split
// is kept, other dims gathered); each device then computes its block of the output — its
// images × all positions × its filters — with im2col and one sgemm per image. The output is
// laid out (batch axes, None, None, filter axes). Both reshards move the least data and move
// nothing when the operands are already laid out so.
//
// Example:
//   auto conv = std::make_shared<Conv2D>(32, Conv2DOptions{.kernel_size = {3, 3},
//                                                          .padding = "same"});
//   Tensor y = (*conv)(images);   // (batch, H, W, 32)
#pragma once

#include <array>
#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct Conv2DOptions {
  std::string name;  // automatic ("conv2d", "conv2d_1", …) when empty
  std::array<int64_t, 2> kernel_size{3, 3};
  std::array<int64_t, 2> strides{1, 1};
  std::string padding = "valid";  // or "same"
  Activation activation = Activation::kLinear;
  bool use_bias = true;
  Initializer kernel_initializer = Initializer::glorot_uniform();
  Initializer bias_initializer = Initializer::zeros();
  std::optional<Regularizer> kernel_regularizer;
  std::optional<Regularizer> bias_regularizer;
  // Keras 2 DTensor per-layer layouts (explicit: they win over LayoutMap rules and
  // distributions; a layout without a mesh takes the model's).
  std::optional<TensorLayout> kernel_layout, bias_layout;
};

class Conv2D : public Layer {
 public:
  /// ValueError for filters, kernel sizes or strides below 1, or an unknown padding.
  explicit Conv2D(int64_t filters, Conv2DOptions options = {});
  const VariablePtr& kernel() const { return kernel_; }
  const VariablePtr& bias() const { return bias_; }
  Shape compute_output_shape(const Shape& input_shape) const override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  int64_t out_extent(int64_t in, int d) const;
  int64_t pad_before(int64_t in, int d) const;
  void check_input(const Shape& input_shape) const;

  int64_t filters_;
  Conv2DOptions options_;
  VariablePtr kernel_, bias_;
};

}  // namespace meshlayout
