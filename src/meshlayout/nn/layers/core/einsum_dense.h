// einsum_dense.h — keras.layers.EinsumDense for the equations transformers use, whose kernel
// contracts the input's trailing dimensions: "btd,dnh->btnh" (a query projection, kernel
// (d, heads, head_dim)), "btnh,nhd->btd" (the attention output, kernel (heads, head_dim, d)),
// "ab,bc->ac", "...b,bc->...c", and kernels that store their letters in another order, as
// Gemma's "btd,ndh->btnh" (kernel (heads, d, head_dim)): permuted for the product each call,
// the gradient permuted back into the kernel's layout (no LoRA on those). The kernel is `kernel`
// (contracted sizes from the input, the others from output_shape); an optional bias over a suffix
// of the output letters (bias_axes); and LoRA (enable_lora: `lora_kernel_a` kernel.shape[:-1] +
// (rank,), `lora_kernel_b` (rank, kernel.shape[-1]); effective kernel = kernel + (alpha / rank) · A
// @ B, the base kernel frozen), as Keras (lora.h, shared with Dense and Conv2D).
//
// Sharded: the kernel is seen as the matrix (contracted, output) without moving data when its
// splits allow (array_view.h: heads split evenly), and the product is the distributed matmul
// — q/k/v kernels split on heads are column-parallel, an output kernel split on heads is
// row-parallel with its partial sums all-reduced. A kernel whose split cannot be seen that way
// (3 heads on a 4-way axis) is resharded whole on that dimension for the product.
//
// Example:
//   auto query = std::make_shared<EinsumDense>("btd,dnh->btnh", Shape{-1, 8, 64},
//                                              EinsumDenseOptions{.name = "query"});
//   Tensor q = (*query)(x);          // x (batch, seq, 512) → (batch, seq, 8, 64)
//   query->enable_lora(4);           // query/lora_kernel_a (512, 8, 4), lora_kernel_b (4, 64)
//   Gradients grads;
//   Array dx = query->backward(x, dq, grads);   // grads.find(*query->lora_kernel_a()), …
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/activations/activation.h"

namespace meshlayout {

struct EinsumDenseOptions {
  std::string name;       // automatic ("einsum_dense", …) when empty
  std::string bias_axes;  // output letters the bias spans (a suffix of the output); "" = none
  Activation activation = Activation::kLinear;
  Initializer kernel_initializer = Initializer::glorot_uniform();
  Initializer bias_initializer = Initializer::zeros();
  std::optional<TensorLayout> kernel_layout, bias_layout;
};

class EinsumDense : public Layer {
 public:
  /// `output_shape`: the output's dimensions after the first (batch) one, -1 where the input
  /// decides (Keras' None). ValueError naming the equation for one this layer does not support,
  /// bias_axes not a suffix of the output, or an output_shape of the wrong length.
  EinsumDense(std::string equation, Shape output_shape, EinsumDenseOptions options = {});

  const VariablePtr& kernel() const { return kernel_; }
  const VariablePtr& bias() const { return bias_; }
  const VariablePtr& lora_kernel_a() const { return lora_.a; }
  const VariablePtr& lora_kernel_b() const { return lora_.b; }
  const LoraWeights& lora() const { return lora_; }
  /// Adds LoRA weights (after build, once), freezing the kernel. ValueError if not built, already
  /// enabled, or rank < 1.
  void enable_lora(int64_t rank, std::optional<double> lora_alpha = std::nullopt,
                   Initializer a_initializer = Initializer::he_uniform(),
                   Initializer b_initializer = Initializer::zeros());
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// The backward of a call (Layer::backward), for every equation the call supports: with dz =
  /// dy through the activation (z recomputed when it is not linear) and the kernel seen as the
  /// matrix W (contracted, output), dx = dz·Wᵀ in x's layout and d kernel = xᵀ·dz in the
  /// kernel's layout (matmul_backward: column-parallel q/k/v kernels give dx partial sums over
  /// 'model', row-parallel output kernels get dz split like their rows; a batch over 'data'
  /// sums d kernel over 'data'); d bias = dz summed over every other dimension in the bias's
  /// layout. With LoRA (effective kernel K + s·A@B, s = alpha / rank) the frozen kernel gets
  /// nothing, d A = s · dK·Bᵀ in A's layout and d B = s · Aᵀ·dK in B's. Collective.
  /// \error ValueError if x is not of the kernel's dtype and the built input shape, or dy not of
  ///   that dtype and the output's shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;
  /// call(x) + residual (the output's shape), in the layer's scope, building it first if
  /// needed: a residual connection fused into a linear layer's product (with a row-parallel
  /// kernel it joins one partial sum instead of every replica); added after the activation
  /// otherwise. Collective. ValueError if the residual's shape differs from the output's.
  Array call_plus(const Array& x, const Array& residual);

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  /// The effective kernel (with LoRA's delta) in `storage`, or the kernel's value.
  const Array& effective_kernel(std::optional<Array>& storage) const;
  /// x · kernel + bias (+ residual), before the activation.
  Array pre_activation(const Array& x, const Array& kernel, const Array* residual = nullptr) const;
  std::string equation_;
  std::string input_spec_, kernel_spec_, output_spec_;
  int contracted_ = 0;  // input's trailing dims contracted with the kernel's
  // Empty when the kernel is stored as the product reads it (contracted letters first, then the
  // output's); else product dimension i is stored dimension kernel_perm_[i].
  std::vector<int> kernel_perm_;
  Shape output_shape_;
  EinsumDenseOptions options_;
  VariablePtr kernel_, bias_;
  LoraWeights lora_;
};

/// x (P…, C…) · kernel (C…, N…) → (P…, N…) on distributed arrays, contracting x's last
/// `contracted` dimensions (EinsumDense's product; Dense is contracted = 1 with a 2-D kernel).
/// With `residual` (the output's shape), returns the product + residual, the residual fused
/// into the product (MatmulOptions::add_to_output) when the kernel has one output dimension,
/// else added after. Collective.
Array contract_trailing(const Array& x, const Array& kernel, int contracted,
                        const Array* residual = nullptr);

}  // namespace meshlayout
