// losses.h — the per-shard kernels of the mean squared error (train/losses.h): its sum of
// squared differences, its gradient and its per-row means. Predictions and targets are shards
// of the same box (the targets resharded to the predictions' layout), F32 or F64 each, every
// element read as double.
//
// Example (per local shard ps of y_pred, t in y_pred's layout):
//   double sum = 0;
//   mse_sum(kind_of(p), {.pred = &ps, .pred_dtype = p.dtype(), .target = t.shard_at(ps.position),
//                        .target_dtype = t.dtype(), .sum = &sum});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// *sum = Σ (p − t)² over the shard, in double, element by element in order.
struct MseSum {
  const Array::Shard* pred;
  DType pred_dtype;
  const Array::Shard* target;
  DType target_dtype;
  double* sum;
};

/// g = coef · (p − t), computed in double and stored in grad_dtype.
struct MseGradient {
  Array::Shard* grad;
  DType grad_dtype;
  const Array::Shard* pred;
  DType pred_dtype;
  const Array::Shard* target;
  DType target_dtype;
  double coef;
};

/// out[r] = Σ_j (p[r, j] − t[r, j])² / last for each row r of the shard (rows of `last`
/// elements; NaN for last == 0, as Keras' mean), stored in out_dtype.
struct MseRowMeans {
  Array::Shard* out;
  DType out_dtype;
  const Array::Shard* pred;
  DType pred_dtype;
  const Array::Shard* target;
  DType target_dtype;
  int64_t last;
};

void mse_sum_cpu(const MseSum& args);
void mse_gradient_cpu(const MseGradient& args);
void mse_row_means_cpu(const MseRowMeans& args);

inline KernelOp<void(const MseSum&)> mse_sum{"mse_sum", &mse_sum_cpu};
inline KernelOp<void(const MseGradient&)> mse_gradient{"mse_gradient", &mse_gradient_cpu};
inline KernelOp<void(const MseRowMeans&)> mse_row_means{"mse_row_means", &mse_row_means_cpu};

}  // namespace meshlayout
