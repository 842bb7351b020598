// layer_normalization.h — keras.layers.LayerNormalization over the last axis, on distributed
// arrays: y = (x - mean) / sqrt(var + epsilon) * gamma + beta, per row of the last dimension
// (biased variance, as Keras' ops.moments). Weights gamma (ones) and beta (zeros), shape
// (features,), created in build: paths "layer_normalization/gamma", "/beta".
//
// Layout: each device normalises the rows it holds. A row must be whole, so an input whose
// last dimension is split is first resharded to the same layout with the last dimension None
// (an all-gather over those axes, as apply_activation's softmax); the output keeps that layout.
// gamma and beta, sharded or replicated, are brought to the layout of the data's last dimension
// (replicated, after the gather), as Dense does with its bias. An input on another mesh of the
// same devices is replicated onto the weights' mesh, as Dense does. Computes in the weights'
// dtype (floatx() at construction, floatx.h): F32 or F64, x of that dtype (no cast); statistics
// in float64 per row either way, the result rounded to the dtype. Other weight dtypes (F16,
// BF16) are refused at build.
//
// Example:
//   auto ln = std::make_shared<LayerNormalization>(LayerNormalizationOptions{.epsilon = 1e-6});
//   Tensor y = (*ln)(x);   // x F32 (F64 under floatx F64) (batch, seq, d) → y, same shape
//   Array dx = ln->backward(x, dy, grads);   // grads.find(*ln->gamma()), find(*ln->beta())
#pragma once

#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct LayerNormalizationOptions {
  std::string name;       // automatic ("layer_normalization", …) when empty
  double epsilon = 1e-3;  // Keras default
  bool center = true;     // add beta
  bool scale = true;      // multiply by gamma
  Initializer beta_initializer = Initializer::zeros();
  Initializer gamma_initializer = Initializer::ones();
  // Keras 2 DTensor per-layer layouts (explicit: they win over LayoutMap rules and
  // distributions; a layout without a mesh takes the model's).
  std::optional<TensorLayout> beta_layout, gamma_layout;
};

class LayerNormalization : public Layer {
 public:
  /// ValueError unless epsilon is finite and >= 0.
  explicit LayerNormalization(LayerNormalizationOptions options = {});
  const LayerNormalizationOptions& options() const { return options_; }
  /// Null when scale (gamma) or center (beta) is false.
  const VariablePtr& gamma() const { return gamma_; }
  const VariablePtr& beta() const { return beta_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// The backward of a call (Layer::backward), rows whole as the call (statistics in double):
  /// with x̂ = (x - mean)·r, r = 1/sqrt(var + epsilon), and d = dy·gamma, dx = r·(d - mean(d) -
  /// x̂·mean(d·x̂)) in x's layout; d gamma = Σ dy·x̂ and d beta = Σ dy over every row, summed
  /// across devices and processes into their layouts. Collective.
  /// \error ValueError for x or dy not of the compute dtype (the weights') and the built shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  /// ValueError for a rank-0 input, or weights neither F32 nor F64 (naming their dtype).
  void build(const Shape& input_shape) override;
  /// ValueError if x is not of the compute dtype (naming both) or its last dimension differs
  /// from the built one.
  Array call(const Array& x) override;

 private:
  /// The weights' dtype (gamma's, else beta's), else the layer's dtype().
  DType compute_dtype() const;
  /// The weights' mesh (where the layer runs), else x's when it has neither gamma nor beta.
  DeviceMesh weights_mesh(const Array& x) const;
  LayerNormalizationOptions options_;
  int64_t features_ = 0;
  VariablePtr gamma_, beta_;
};

}  // namespace meshlayout
