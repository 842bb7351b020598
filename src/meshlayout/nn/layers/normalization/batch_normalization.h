// batch_normalization.h — keras.layers.BatchNormalization over the last axis on distributed
// arrays: y = (x - mean) / sqrt(variance + epsilon) * gamma + beta.
// Weights, created in build in Keras' order: gamma (ones), beta (zeros) trainable;
// moving_mean (zeros), moving_variance (ones) non-trainable; shape (features,); paths
// "batch_normalization/gamma", "/beta", "/moving_mean", "/moving_variance".
// Keras 2 DTensor per-layer layouts: gamma_layout, beta_layout, moving_mean_layout,
// moving_variance_layout (explicit layouts: they win over LayoutMap rules).
//
// Modes (set_training, as Dropout; the default is inference):
//   inference: mean, variance = moving_mean, moving_variance.
//   training:  mean, variance = the batch statistics over every axis but the last, across the
//              whole global batch (every data shard and process): sums through
//              sum_over_leading, whose contraction over a batch split is completed by matmul's
//              collective; two passes (mean, then the mean of (x - mean)²: the biased
//              variance, as Keras). Each training call then updates, as Keras,
//              moving = moving × momentum + batch × (1 - momentum). recompute() (a model's
//              backward) uses the batch statistics but updates nothing.
//
// Layout: element-wise per feature, so the input keeps its layout (no communication for the
// data besides the statistics' sums); the weights are brought to the layout of the input's
// last dimension.
//
// Dtype: the weights' (floatx() at construction, floatx.h), F32 or F64; x and dy must be of it
// (no cast), the statistics and moving statistics are kept in it, and each element is computed
// in double then rounded to it. Weights of another dtype (F16, BF16) are refused at build.
//
// Backward (Layer::backward, the mode of the layer now): d beta = Σ dy, d gamma = Σ dy·x̂
// (x̂ = (x - mean)/σ, sums over every axis but the last, across the global batch, summed into
// the weights' layouts), and dx in x's layout:
//   inference: dx = gamma/σ · dy (moving statistics, constants);
//   training:  dx = gamma/σ · (dy - Σdy/N - x̂ · Σ(dy·x̂)/N), N the global count per feature
//              (through the batch statistics, recomputed from x).
// moving_mean / moving_variance get no gradient (non-trainable), nor does a non-trainable
// gamma or beta.
//
// Example:
//   auto bn = std::make_shared<BatchNormalization>(BatchNormalizationOptions{.epsilon = 1e-5});
//   bn->set_training(true);
//   Tensor y = (*bn)(x);   // x F32 (F64 under floatx F64) (batch, …, features) → y, same layout
//   Array dx = bn->backward(x.value(), dy, grads);   // grads.find(*bn->gamma()), …
#pragma once

#include <optional>
#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct BatchNormalizationOptions {
  std::string name;        // automatic ("batch_normalization", …) when empty
  double epsilon = 1e-3;   // Keras default
  double momentum = 0.99;  // Keras default
  bool center = true;      // add beta
  bool scale = true;       // multiply by gamma
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
  /// Training mode: batch statistics, moving statistics updated by each call; inference (the
  /// default): the moving statistics.
  void set_training(bool training) override { training_ = training; }
  bool training() const { return training_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// See the file comment. FailedPreconditionError before the layer is built; ValueError if x
  /// is not of the weights' dtype with the built features or dy is not of x's dtype and shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;
  /// The call again without updating the moving statistics.
  Array recompute(const Array& x) override;

 protected:
  /// ValueError for a rank-0 input, or weights neither F32 nor F64 (naming their dtype).
  void build(const Shape& input_shape) override;
  /// ValueError if x is not of the weights' dtype (naming both) or its last dimension differs
  /// from the built one.
  Array call(const Array& x) override;

 private:
  struct Moments {
    Array mean, variance;  // (features,) in x's dtype, laid out as the data's last dimension
  };
  /// x's layout when x is on the weights' mesh, else replicated on it.
  TensorLayout data_layout(const Array& x) const;
  /// The batch statistics of xs (training) or the moving ones (inference). Collective.
  Moments moments(const Array& xs) const;
  void update_moving(const Moments& batch);

  BatchNormalizationOptions options_;
  int64_t features_ = 0;
  bool training_ = false;
  bool update_moving_ = true;  // false inside recompute
  VariablePtr gamma_, beta_, moving_mean_, moving_variance_;
};

}  // namespace meshlayout
