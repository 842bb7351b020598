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
// Backward (Layer::backward): with dz = dy through the activation (z recomputed from x), in
// the call's output layout (batch axes, None, None, filter axes):
//   d bias   = dz summed over images and positions (sum_over_leading), in the bias's layout;
//   d kernel = im2col(x)ᵀ · dz through matmul_backward_weight: the columns keep the batch
//              split, so the contraction over images is a partial sum over the batch axes
//              completed by matmul's collective (the data-parallel all-reduce), then reshaped
//              to (kh, kw, in_channels, filters) in the kernel's layout;
//   dx       = col2im(dz · kernelᵀ) through matmul_backward_input: the contraction over a
//              filter split is a partial sum reduced by matmul; col2im adds every patch
//              element back to the input element it was read from (padding dropped), on
//              each device for its images, then dx goes to x's layout.
// The backward holds the im2col columns of the local images at once (B × OH × OW × kh·kw·C).
//
// LoRA (enable_lora, lora.h): the convolution and its backward run with the effective kernel
// kernel + (alpha / rank) · A @ B; d kernel goes to A and B, the kernel being frozen.
//
// Dtype: the weights' (floatx() at construction, floatx.h), F32 (sgemm) or F64 (dgemm); x and
// dy must be of it (no cast). Weights of another dtype (F16, BF16) are refused at build.
//
// Example:
//   auto conv = std::make_shared<Conv2D>(32, Conv2DOptions{.kernel_size = {3, 3},
//                                                          .padding = "same"});
//   Tensor y = (*conv)(images);   // (batch, H, W, 32)
//   Array dx = conv->backward(images_array, dy, grads);   // dx in images' layout,
//                                                         // grads.find(*conv->kernel())
#pragma once

#include <array>
#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/activations/activation.h"

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
  const VariablePtr& lora_kernel_a() const { return lora_.a; }
  const VariablePtr& lora_kernel_b() const { return lora_.b; }
  const LoraWeights& lora() const { return lora_; }
  /// keras Conv2D.enable_lora (BaseConv; after build, once): lora_kernel_a (kh, kw,
  /// in_channels, rank) and lora_kernel_b (rank, filters) with the kernel's regulariser; the
  /// kernel frozen; the convolution runs with kernel + (alpha / rank) · A @ B (lora.h).
  /// ValueError if not built, already enabled, or rank < 1.
  void enable_lora(int64_t rank, std::optional<double> lora_alpha = std::nullopt,
                   const Initializer& a_initializer = Initializer::he_uniform(),
                   const Initializer& b_initializer = Initializer::zeros());
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// See the file comment: dx in x's layout, d kernel and d bias accumulated in their
  /// variables' layouts, summed over the batch replicas. A non-trainable weight gets no
  /// gradient. FailedPreconditionError before the layer is built; ValueError if x is not NHWC
  /// of the kernel's dtype with the built channels, or dy not of x's dtype and the call's output
  /// shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  /// ValueError for an input not of rank 4, or a kernel neither F32 nor F64 (naming its dtype).
  void build(const Shape& input_shape) override;
  /// ValueError for x not NHWC of the built channels, or not of the kernel's dtype (naming both).
  Array call(const Array& x) override;

 private:
  int64_t out_extent(int64_t in, int d) const;
  int64_t pad_before(int64_t in, int d) const;
  void check_input(const Shape& input_shape) const;
  void check_call_input(const Array& x) const;
  /// The axes of x's batch split the call keeps (none when x is on another mesh or the split
  /// uses a filter axis).
  DimSharding batch_axes_for(const Array& x) const;
  /// The convolution of x by `kernel` (the kernel's or the effective one) plus bias, before
  /// the activation, in (batch axes, None, None, filter axes).
  Array pre_activation(const Array& x, const Array& kernel_value) const;
  /// The kernel's value, or with LoRA the effective kernel kept in `storage`.
  const Array& effective_kernel(std::optional<Array>& storage) const;

  int64_t filters_;
  Conv2DOptions options_;
  VariablePtr kernel_, bias_;
  LoraWeights lora_;
};

}  // namespace meshlayout
