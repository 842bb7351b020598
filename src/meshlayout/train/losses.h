// losses.h — Keras 3 losses on distributed arrays, value and gradient: mean squared error
// (keras.losses.MeanSquaredError) and the Loss objects compile() names ("mse",
// "sparse_categorical_crossentropy", …), as keras.losses.get.
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
Array mean_squared_error_backward(const Array& y_pred, const Array& y_true, double grad_scale = 1.0);
/// Both, sharing the reshard of y_true. Collective.
LossResult mean_squared_error_with_grad(const Array& y_pred, const Array& y_true);

struct LossOptions {
  /// sparse_categorical_crossentropy: y_pred are logits. Only true is implemented (the
  /// vocab-parallel op of ops/cross_entropy.h); false is a ValueError saying so.
  bool from_logits = false;
};

/// A compiled loss (keras.losses.Loss with reduction "sum_over_batch_size").
class Loss {
 public:
  virtual ~Loss() = default;
  /// The canonical Keras name: "mean_squared_error", "sparse_categorical_crossentropy".
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
/// "sparse_categorical_crossentropy".
std::vector<std::string> loss_names();

/// keras.losses.get(name). ValueError listing the valid names for any other name, and for
/// sparse_categorical_crossentropy without from_logits.
std::unique_ptr<Loss> make_loss(std::string_view name, const LossOptions& options = {});

}  // namespace meshlayout
