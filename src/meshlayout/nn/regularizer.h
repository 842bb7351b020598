// regularizer.h — weight regularisers (keras.regularizers.L1, L2, L1L2), computed on a
// distributed variable without gathering it: each device sums its own box, replicas are
// counted once, processes add their parts with an all-reduce.
//
// Example:
//   Dense d(64, {.kernel_regularizer = Regularizer::l2(0.01)});
//   ... after the model is built:  double loss = model->losses()[0];  // 0.01 * sum(kernel^2)
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
  std::string to_string() const;
};

}  // namespace meshlayout
