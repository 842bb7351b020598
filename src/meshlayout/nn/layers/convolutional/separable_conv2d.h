// separable_conv2d.h — keras.layers.SeparableConv2D on distributed arrays (NHWC): a depthwise
// convolution of each input channel by its own `depth_multiplier` filters, then a pointwise
// (1x1) convolution to `filters` channels, plus bias and activation:
//   d[b, oh, ow, c·M + m] = Σ_ij x[b, oh·sh + i - top, ow·sw + j - left, c] · depthwise[i, j, c, m]
//   y = act(d · pointwise[0, 0] + bias)
// (TF "same"/"valid" padding, strides applied by the depthwise step, as keras ops.separable_conv).
// Variables, Keras paths: `separable_conv2d/depthwise_kernel` (kh, kw, in_channels,
// depth_multiplier), `separable_conv2d/pointwise_kernel` (1, 1, in_channels·depth_multiplier,
// filters), `separable_conv2d/bias` (filters,); each with its initializer (glorot_uniform,
// glorot_uniform, zeros), regulariser and explicit layout option (as Conv2D's kernel_layout).
// Not supported: data_format channels_first, dilation_rate, constraints.
//
// Sharding: as Conv2D, the depthwise step runs on x split on its batch dimension only (H, W, C
// gathered; the batch split kept when x is on the pointwise kernel's mesh), with the depthwise
// kernel gathered (it is small), giving d in (batch axes, None, None, None); the pointwise
// step is the distributed matmul of d by the pointwise kernel seen as the (in·M, filters)
// matrix, so a kernel split on filters is column-parallel, one split on in·M row-parallel.
// Backward (Layer::backward): dz = dy through the activation (z recomputed); d bias = dz summed
// over every leading dimension; d pointwise = dᵀ·dz and dd = dz·pointwiseᵀ by matmul_backward
// (the batch sum a partial sum over the batch axes, completed by the collective); then per
// device for its images dx[…, c] = Σ dd · depthwise (then to x's layout) and the depthwise
// gradient's per-image partials (B, kh, kw, C, M), summed over the batch by sum_over_leading
// into the kernel's layout.
// Dtype: the weights' (floatx() at construction), F32 or F64; x and dy of it.
//
// Example:
//   auto sep = std::make_shared<SeparableConv2D>(16, SeparableConv2DOptions{.kernel_size = {3, 3},
//                                                                          .padding = "same"});
//   Tensor y = (*sep)(images);   // (batch, H, W, 16)
//   Array dx = sep->backward(x, dy, grads);   // grads.find(*sep->depthwise_kernel()), …
#pragma once

#include <array>
#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/activations/activation.h"

namespace meshlayout {

struct SeparableConv2DOptions {
  std::string name;  // automatic ("separable_conv2d", …) when empty
  std::array<int64_t, 2> kernel_size{3, 3};
  std::array<int64_t, 2> strides{1, 1};
  std::string padding = "valid";  // or "same"
  int64_t depth_multiplier = 1;
  Activation activation = Activation::kLinear;
  bool use_bias = true;
  Initializer depthwise_initializer = Initializer::glorot_uniform();
  Initializer pointwise_initializer = Initializer::glorot_uniform();
  Initializer bias_initializer = Initializer::zeros();
  std::optional<Regularizer> depthwise_regularizer, pointwise_regularizer, bias_regularizer;
  // Explicit per-variable layouts (win over rules and distributions; a layout without a mesh
  // takes the model's).
  std::optional<TensorLayout> depthwise_kernel_layout, pointwise_kernel_layout, bias_layout;
};

class SeparableConv2D : public Layer {
 public:
  /// ValueError (Keras' checks) for filters or depth_multiplier below 1, kernel sizes or strides
  /// below 1, or a padding other than "valid" and "same".
  explicit SeparableConv2D(int64_t filters, SeparableConv2DOptions options = {});
  const VariablePtr& depthwise_kernel() const { return depthwise_; }
  const VariablePtr& pointwise_kernel() const { return pointwise_; }
  const VariablePtr& bias() const { return bias_; }
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// See the file comment: dx in x's layout, every weight's gradient in its layout (none for a
  /// non-trainable weight). FailedPreconditionError before the layer is built; ValueError if x
  /// is not NHWC of the built channels and the kernels' dtype, or dy not of the output's shape
  /// and that dtype.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  /// ValueError for an input not of rank 4, or weights neither F32 nor F64.
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  int64_t out_extent(int64_t in, int d) const;
  int64_t pad_before(int64_t in, int d) const;
  void check_input(const Shape& input_shape) const;
  /// x laid out for the depthwise step: (batch axes, None, None, None) on the pointwise mesh.
  Array depthwise_input(const Array& x) const;
  /// The depthwise step on `in` (from depthwise_input): d in in's layout.
  Array depthwise(const Array& in) const;
  /// The pointwise kernel as the (in·M, filters) matrix (a view, or a reshard in `storage`).
  Array pointwise_matrix(std::optional<Array>& storage) const;
  /// d · pointwise + bias, before the activation.
  Array pointwise_plus_bias(const Array& d, const Array& pw) const;

  int64_t filters_;
  SeparableConv2DOptions options_;
  VariablePtr depthwise_, pointwise_, bias_;
};

}  // namespace meshlayout
