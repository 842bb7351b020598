// dense.h — keras.layers.Dense on distributed arrays: y = activation(x @ kernel + bias), kernel
// (in, units), bias (units,), any layout for each (replicated, column- or row-parallel, 2-D),
// with its backward and Keras' LoRA (lora.h). Paths "<layer>/kernel", "<layer>/bias".
//
// Example:
//   Tensor inputs = Input({10}, /*batch_size=*/10);
//   auto d1 = std::make_shared<Dense>(20, DenseOptions{.name = "d1", .activation =
//   Activation::kRelu}); Tensor x = (*d1)(inputs);                  // builds d1: kernel (10, 20),
//   bias (20,) Array dx = d1->backward(xa, dy, grads);    // dx in xa's layout;
//   grads.find(*d1->kernel())
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/activations/activation.h"

namespace meshlayout {

struct DenseOptions {
  std::string name;  // automatic ("dense", "dense_1", …) when empty
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

/// keras.layers.Dense: y = activation(x @ kernel + bias); kernel (in, units), bias (units,).
/// With LoRA (enable_lora, lora.h) the kernel is kernel + (alpha / rank) · A @ B.
class Dense : public Layer {
 public:
  explicit Dense(int64_t units, DenseOptions options = {});
  int64_t units() const { return units_; }
  const VariablePtr& kernel() const { return kernel_; }
  const VariablePtr& bias() const { return bias_; }
  const VariablePtr& lora_kernel_a() const { return lora_.a; }
  const VariablePtr& lora_kernel_b() const { return lora_.b; }
  const LoraWeights& lora() const { return lora_; }
  /// keras Dense.enable_lora (after build, once): lora_kernel_a (input_dim, rank) and
  /// lora_kernel_b (rank, units) with the kernel's regulariser; the kernel frozen; lora_alpha
  /// defaults to rank. ValueError if not built, already enabled, or rank < 1.
  void enable_lora(int64_t rank, std::optional<double> lora_alpha = std::nullopt,
                   const Initializer& a_initializer = Initializer::he_uniform(),
                   const Initializer& b_initializer = Initializer::zeros());
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// dx = dz·kernelᵀ in x's layout, d kernel = xᵀ·dz in the kernel's layout (summed over the
  /// batch: a partial sum over 'data' for a batch-split x), d bias = dz summed over every
  /// leading dimension in the bias's layout, where dz = dy through the activation (z = x·kernel
  /// + bias recomputed when the activation is not linear). Column- and row-parallel kernels
  /// run through matmul_backward's conjugate collectives. A non-trainable weight gets no
  /// gradient. With LoRA the kernel is the effective one and d kernel goes to A and B (lora.h).
  /// \error ValueError if x or dy is not in the kernel's dtype, or dy not of the
  /// call's output shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  /// x on the kernel's mesh (replicated onto it when x is on another mesh, as the call does).
  const Array& on_kernel_mesh(const Array& x, std::optional<Array>& storage) const;
  /// The kernel the layer computes with: the variable's value, or with LoRA the effective
  /// kernel kept in `storage`.
  const Array& effective_kernel(std::optional<Array>& storage) const;
  /// x·kernel + bias, before the activation.
  Array pre_activation(const Array& x, const Array& kernel) const;
  int64_t units_;
  DenseOptions options_;
  VariablePtr kernel_, bias_;
  LoraWeights lora_;
};

}  // namespace meshlayout
