// rms_normalization.h — keras.layers.RMSNormalization (and keras-hub's LlamaLayerNorm) over the
// last axis, on distributed arrays: y = x · rsqrt(mean(x²) + epsilon) · scale, per row; the
// squares summed in eight float32 lanes added in float64, the product in float32. Weight `scale`
// (ones), shape (features,), created in build: path "rms_normalization/scale".
//
// Layout: as LayerNormalization — rows must be whole, so a split last dimension is gathered
// first; the output keeps the input's other splits; `scale` is brought to the layout of the
// data's last dimension (replicated). Inputs on another mesh follow the weight's mesh.
//
// Example:
//   auto norm = std::make_shared<RMSNormalization>(RMSNormalizationOptions{.epsilon = 1e-6});
//   Tensor y = (*norm)(x);   // x F32 (or F64 under floatx F64) (batch, seq, d) → y, same shape
//   Array dx = norm->backward(x, dy, grads);   // grads.find(*norm->scale()): (d,)
#pragma once

#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct RMSNormalizationOptions {
  std::string name;       // automatic ("rms_normalization", …) when empty
  double epsilon = 1e-6;  // Keras and keras-hub default
  Initializer scale_initializer = Initializer::ones();
  std::optional<TensorLayout> scale_layout;  // explicit layout (wins over rules)
  /// Gemma's RMSNorm (keras-hub's and Hugging Face's Gemma): rows times (1 + scale), the scale
  /// starting at zero (give scale_initializer = zeros) — the gradient of the scale is the same.
  bool unit_offset = false;
};

class RMSNormalization : public Layer {
 public:
  /// ValueError unless epsilon is finite and >= 0.
  explicit RMSNormalization(RMSNormalizationOptions options = {});
  const VariablePtr& scale() const { return scale_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// The backward of a call (Layer::backward), rows whole as the call: with r = rsqrt(mean(x²)
  /// + epsilon) per row, dx = r·(g·dy) - x·r³·Σ(g·dy·x)/n (row sums in double) in x's layout,
  /// d scale = Σ over every row of dy·x·r, summed across devices and processes into the
  /// scale's layout. Collective. \error ValueError for x or dy not of the scale's dtype (F32 or
  /// F64) and the built shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  /// ValueError for a rank-0 input, or a scale of a dtype other than F32 or F64 (built under
  /// floatx BF16 or F16: the layer computes in F32 or F64 only).
  void build(const Shape& input_shape) override;
  /// ValueError if x is not of the scale's dtype (F32 or F64: computed in it, no cast) or its
  /// last dimension differs from the built one.
  Array call(const Array& x) override;

 private:
  RMSNormalizationOptions options_;
  int64_t features_ = 0;
  VariablePtr scale_;
};

}  // namespace meshlayout
