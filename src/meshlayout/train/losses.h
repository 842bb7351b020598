// losses.h — Keras 3 losses on distributed arrays, value and gradient: mean squared error
// (keras.losses.MeanSquaredError) and the Loss objects compile() names ("mse",
// "categorical_crossentropy", "sparse_categorical_crossentropy", …), as keras.losses.get. The
// cross-entropies are the vocab-parallel ops of ops/cross_entropy.h (from logits or, Keras'
// default, from probabilities: normalised by the row sum and clipped to [1e-7, 1 − 1e-7]).
//
// Mean squared error, exactly as Keras: mean_squared_error(y_true, y_pred) is
// mean((y_true − y_pred)², axis=-1), then the default reduction "sum_over_batch_size" divides
// the sum of those row means by their count, so — every row having the same last dimension —
// the loss is the mean over ALL elements: Σ (p − t)² / N, N = prod(shape). The gradient is
// 2 (p − t) / N in y_pred's layout and dtype. y_pred may have any layout: y_true is brought to
// it (a reshard of the targets only), each device sums its box in float64 (only the devices
// of replica 0 count), the boxes are added in shard order, and the processes' sums in rank
// order, so every process gets the same double.
//
// Example:
//   Array y_pred = (*model)(x).value();                      // (B, 1), any layout
//   LossResult r = mean_squared_error_with_grad(y_pred, y_true);
//   r.gradient.layout() == y_pred.layout();
//   std::unique_ptr<Loss> loss = make_loss("mse");
//   LossResult same = loss->value_and_gradient(y_pred, y_true);
//   auto cce = make_loss("categorical_crossentropy", {.from_logits = false});  // after a softmax
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/array/array.h"

namespace meshlayout {

struct LossResult {
  double value;    // equal on every process
  Array gradient;  // d value / d y_pred, in y_pred's layout and dtype
};

/// keras.losses.mean_squared_error reduced with sum_over_batch_size: Σ (p − t)² / N.
/// y_pred F32/F64, y_true F32/F64 of y_pred's shape (Keras casts it to y_pred's dtype; the
/// difference is taken in float64 here). ValueError naming both shapes/dtypes otherwise, on every
/// process before any communication. 0 for an empty y_pred. Collective.
double mean_squared_error(const Array& y_pred, const Array& y_true);
/// 2 (p − t) · grad_scale / N in y_pred's layout and dtype. Collective.
Array mean_squared_error_backward(const Array& y_pred, const Array& y_true,
                                  double grad_scale = 1.0);
/// Both, sharing the reshard of y_true. Collective.
LossResult mean_squared_error_with_grad(const Array& y_pred, const Array& y_true);
/// keras.losses.mean_squared_error(y_true, y_pred) without reduction: mean((p − t)², axis=-1),
/// shape y_pred's without the last dim, in y_pred's dtype, laid out as y_pred without the last dim
/// (computed in float64 per row; a split last dim is first gathered). Same checks as
/// mean_squared_error; ValueError for a rank-0 y_pred. Collective.
Array mean_squared_error_values(const Array& y_pred, const Array& y_true);

struct LossOptions {
  /// The cross-entropies: y_pred are logits (true) or probabilities (false, Keras' default).
  bool from_logits = false;
  /// categorical_crossentropy: targets become t·(1 − ls) + ls/classes; in [0, 1]. Nonzero for
  /// another loss is a ValueError naming it (Keras' other losses have no such argument).
  double label_smoothing = 0.0;
};

/// A compiled loss (keras.losses.Loss with reduction "sum_over_batch_size").
class Loss {
 public:
  virtual ~Loss() = default;
  /// The canonical Keras name: "mean_squared_error", "categorical_crossentropy",
  /// "sparse_categorical_crossentropy".
  virtual std::string name() const = 0;
  /// ValueError naming the shapes and dtypes unless a prediction of `pred_shape`/`pred_dtype`
  /// and a target of `true_shape`/`true_dtype` (batch dimension included) can be compared.
  /// Replicated metadata only: every process reaches the same verdict.
  virtual void check(const Shape& pred_shape, DType pred_dtype, const Shape& true_shape,
                     DType true_dtype) const = 0;
  /// The reduced loss. Collective.
  virtual double value(const Array& y_pred, const Array& y_true) const;
  /// The loss and d loss / d y_pred. Collective.
  virtual LossResult value_and_gradient(const Array& y_pred, const Array& y_true) const = 0;
};

/// The names make_loss accepts, in order: "mean_squared_error", "mse",
/// "categorical_crossentropy", "sparse_categorical_crossentropy".
std::vector<std::string> loss_names();

/// keras.losses.get(name) with the Loss's from_logits / label_smoothing. ValueError naming the
/// name and listing the valid ones for any other name; ValueError naming the value for a
/// label_smoothing outside [0, 1] or given to a loss without one.
std::unique_ptr<Loss> make_loss(std::string_view name, const LossOptions& options = {});

}  // namespace meshlayout
