// prelu.h — keras.layers.PReLU on distributed arrays: y = x for x >= 0, alpha · x for x < 0
// (Keras: relu(x) - alpha · relu(-x)), alpha a learned weight of shape input_shape[1:] with
// the `shared_axes` set to 1 (shared_axes = {1, 2} on NHWC: one alpha per channel).
//
// Variable: `alpha` (Keras path "p_re_lu/alpha", the auto name of the class PReLU), initialised
// alpha_initializer (default zeros), with alpha_regularizer; `alpha_layout` lays it out
// explicitly (as Dense's kernel_layout), else the model's rules / distribution, else
// replicated. alpha_constraint: not supported (meshlayout has no weight constraints).
// Sharding: element-wise in x's layout (alpha read replicated on x's mesh, a small gather);
// the output is in x's layout.
// Backward: dx = dy · (x > 0 ? 1 : alpha) in x's layout; d alpha = Σ dy · min(x, 0) over the
// batch and the shared axes: summed over the batch with sum_over_leading (a batch split over
// 'data' is completed by its collective, as a bias gradient), then over the shared axes on
// each device; in alpha's layout.
// Dtype: the layer's (floatx() at construction), F32 or F64; x and dy of it.
//
// Example:
//   auto prelu = std::make_shared<PReLU>(PReLUOptions{.shared_axes = {1, 2}});
//   Tensor y = (*prelu)(images);          // alpha (1, 1, channels)
//   Array dx = prelu->backward(x, dy, grads);   // grads.find(*prelu->alpha())
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct PReLUOptions {
  std::string name;  // automatic ("p_re_lu", "p_re_lu_1", …) when empty
  Initializer alpha_initializer = Initializer::zeros();
  std::optional<Regularizer> alpha_regularizer;
  std::vector<int64_t> shared_axes;  // axes of the input (1 … rank-1) sharing one alpha
  std::optional<TensorLayout> alpha_layout;
};

class PReLU : public Layer {
 public:
  explicit PReLU(PReLUOptions options = {});
  const VariablePtr& alpha() const { return alpha_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// See the file comment. FailedPreconditionError before the layer is built; ValueError for x
  /// not of the built shape (but the batch and the shared axes) or not of the layer's dtype,
  /// or dy not of x's shape and dtype.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  /// ValueError for an input of rank < 2, a shared axis outside [1, rank - 1], or a dtype
  /// other than F32/F64.
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override;

 private:
  void check_input(const Array& x) const;
  /// alpha replicated on x's mesh.
  Array alpha_on(const Array& x) const;
  PReLUOptions options_;
  Shape built_shape_;
  VariablePtr alpha_;
};

}  // namespace meshlayout
