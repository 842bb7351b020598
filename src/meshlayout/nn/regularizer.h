// regularizer.h — weight regularisers (keras.regularizers.L1, L2, L1L2), computed on a
// distributed variable without gathering it: each device sums its own box, replicas are
// counted once, processes add their parts with an all-reduce. gradient() is the penalty's
// derivative, l1·sign(w) + 2·l2·w, in the variable's own layout, each device on its own box
// (no communication): the trainer adds it to the loss's gradient (Keras' compute_loss sums
// the loss and model.losses before differentiating).
//
// Example:
//   Dense d(64, {.kernel_regularizer = Regularizer::L2(0.01)});
//   ... after the model is built:  double loss = model->losses()[0];  // 0.01 * sum(kernel^2)
//   Array g = Regularizer::L2(0.01).gradient(kernel->value());       // 0.02 * kernel, same layout
#pragma once

#include <string>

#include "meshlayout/array/array.h"

namespace meshlayout {

struct Regularizer {
  double l1 = 0.0;
  double l2 = 0.0;

  static Regularizer L1(double l1) { return {l1, 0.0}; }
  static Regularizer L2(double l2) { return {0.0, l2}; }
  static Regularizer L1L2(double l1, double l2) { return {l1, l2}; }

  /// l1 * sum(|w|) + l2 * sum(w^2) over every element of `w` (F32 or F64), once each.
  /// Collective under several processes.
  double operator()(const Array& w) const;

  /// The gradient of operator() with respect to w: l1 * sign(w) + 2 * l2 * w, element by
  /// element (sign(0) = 0, as the derivative JAX and TF give |w| at 0; a term whose
  /// coefficient is 0 is left out, as Keras' L1L2 leaves it out of the penalty), in w's
  /// dtype and layout. Each device computes its own box: no communication.
  /// \error ValueError for a dtype other than F32/F64.
  Array gradient(const Array& w) const;

  /// grad += gradient(w), in place. `grad` must have w's shape, dtype and layout.
  /// No communication. \error ValueError naming both when they differ.
  void accumulate_gradient(const Array& w, Array& grad) const;

  std::string to_string() const;
};

}  // namespace meshlayout
