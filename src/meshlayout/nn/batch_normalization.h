// batch_normalization.h — keras.layers.BatchNormalization over the last axis, inference mode,
// on distributed arrays: y = (x - moving_mean) / sqrt(moving_variance + epsilon) * gamma + beta.
// Weights, created in build in Keras' order: gamma (ones), beta (zeros) trainable;
// moving_mean (zeros), moving_variance (ones) non-trainable; shape (features,); paths
// "batch_normalization/gamma", "/beta", "/moving_mean", "/moving_variance".
// Keras 2 DTensor per-layer layouts: gamma_layout, beta_layout, moving_mean_layout,
// moving_variance_layout (explicit layouts: they win over LayoutMap rules).
//
// Layout: element-wise per feature, so the input keeps its layout (no communication for the
// data); the four weights are brought to the layout of the input's last dimension. Training
// (batch statistics and moving-average updates) is not implemented: it arrives with the train
// module; set_training(true) is refused.
//
// Example:
//   auto bn = std::make_shared<BatchNormalization>(BatchNormalizationOptions{.epsilon = 1e-5});
//   Tensor y = (*bn)(x);   // x F32 (batch, …, features) → y, same shape and layout
#pragma once

#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct BatchNormalizationOptions {
  std::string name;       // automatic ("batch_normalization", …) when empty
  double epsilon = 1e-3;  // Keras default
  double momentum = 0.99;  // Keras default; used once training arrives
  bool center = true;     // add beta
  bool scale = true;      // multiply by gamma
  Initializer beta_initializer = Initializer::zeros();
  Initializer gamma_initializer = Initializer::ones();
  Initializer moving_mean_initializer = Initializer::zeros();
  Initializer moving_variance_initializer = Initializer::ones();
  std::optional<TensorLayout> beta_layout, gamma_layout, moving_mean_layout, moving_variance_layout;
};

class BatchNormalization : public Layer {
 public:
  /// ValueError unless epsilon is finite and > 0 and 0 <= momentum <= 1.
  explicit BatchNormalization(BatchNormalizationOptions options = {});
  /// Null when scale (gamma) or center (beta) is false.
  const VariablePtr& gamma() const { return gamma_; }
  const VariablePtr& beta() const { return beta_; }
  const VariablePtr& moving_mean() const { return moving_mean_; }
  const VariablePtr& moving_variance() const { return moving_variance_; }
  /// Only inference exists: true is refused with FailedPreconditionError.
  void set_training(bool training);
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }

 protected:
  /// ValueError for a rank-0 input.
  void build(const Shape& input_shape) override;
  /// ValueError if x is not F32 or its last dimension differs from the built one.
  Array call(const Array& x) override;

 private:
  BatchNormalizationOptions options_;
  int64_t features_ = 0;
  VariablePtr gamma_, beta_, moving_mean_, moving_variance_;
};

}  // namespace meshlayout
