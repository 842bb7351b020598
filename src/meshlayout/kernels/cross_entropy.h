// cross_entropy.h — the per-shard kernels of the vocab-parallel cross-entropy
// (ops/cross_entropy.h, NOTE [Vocab-parallel cross-entropy]): a device's per-row statistics of its
// class block (first round; the second round of categorical probabilities), the loss of its rows
// from the gathered statistics (summed, or one value per row), and the gradient of its box. All
// arithmetic in double; y_pred F32 or F64, sparse labels I32 or I64, categorical targets F32 or
// F64. Statistics shards are F64 (…, k, width): width 4 from logits (max, Σ exp(x − max), Σ t,
// Σ t·x), 2 from probabilities (Σ p, then p[label] or Σ t); the second round (…, k, 2) holds the
// partial loss and the in-band Σ t.
//
// Example (ops/cross_entropy_stats.cc, per local shard xs of y_pred, on the pool):
//   cross_entropy_stats(kind, {.pred = &xs, .targets = ts, .stats = ss, .spec = spec,
//                              .pred_shape = &shape, .pred_dtype = DType::kF32,
//                              .target_dtype = DType::kI32, .failure = &failures[i]});
#pragma once

#include <cstdint>
#include <optional>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// Which loss, and how y_pred is read.
struct CrossEntropySpec {
  bool sparse;
  bool from_logits;
  double smoothing;  // categorical only
  // Statistics per row and class block of the first (and only, but for categorical
  // probabilities) round.
  int64_t width() const { return from_logits ? 4 : 2; }
  bool two_rounds() const { return !sparse && !from_logits; }
};

/// A bad input a device found: kind 0 a label outside [0, V) (`label`), kind 1 a non-finite
/// prediction (`value`); `at` its global coordinates (the labels' or y_pred's) and `flat` their
/// row-major index. The lowest (kind, flat) of a shard is kept.
struct CrossEntropyFailure {
  int kind = 0;
  int64_t flat = 0;
  Shape at;
  int64_t label = 0;
  double value = 0;
  bool before(const CrossEntropyFailure& o) const {
    return kind != o.kind ? kind < o.kind : flat < o.flat;
  }
};

/// First round: the (rows, 1, width) statistics of pred's box into `stats`; a bad label or a
/// non-finite prediction into *failure (the shard's first, as CrossEntropyFailure::before).
struct CrossEntropyStats {
  const Array::Shard* pred;
  const Array::Shard* targets;  // the labels of pred's rows (sparse) or pred's box (categorical)
  Array::Shard* stats;
  CrossEntropySpec spec;
  const Shape* pred_shape;  // the global shape of y_pred (…, V)
  DType pred_dtype, target_dtype;
  std::optional<CrossEntropyFailure>* failure;
};

/// Second round (categorical probabilities): per row the partial loss Σ −t·log clip(p/S) and the
/// in-band Σ t of pred's box, S from the gathered first round `stats1` (rows, k, 2).
struct CrossEntropyStats2 {
  const Array::Shard* pred;
  const Array::Shard* targets;
  const Array::Shard* stats1;
  Array::Shard* out;
  CrossEntropySpec spec;
  int64_t k, classes;
  DType pred_dtype, target_dtype;
};

/// Adds the loss of every row of a gathered statistics shard (rows, k, width), in row order, to
/// *total. stats2: the second round's (categorical probabilities), else null.
struct CrossEntropyLossSum {
  const Array::Shard* stats1;
  const Array::Shard* stats2;
  CrossEntropySpec spec;
  int64_t k;
  double* total;
};

/// The loss of every row of `out`'s box (y_pred's leading dims) from the gathered statistics of
/// the same rows, in out's dtype (F32 or F64).
struct CrossEntropyRowLosses {
  Array::Shard* out;
  const Array::Shard* stats1;
  const Array::Shard* stats2;
  CrossEntropySpec spec;
  int64_t k;
  DType dtype;
};

/// d loss / d y_pred of pred's box, times `coef`, into grad (the same box, pred's dtype).
struct CrossEntropyGrad {
  Array::Shard* grad;
  const Array::Shard* pred;
  const Array::Shard* targets;
  const Array::Shard* stats1;
  const Array::Shard* stats2;
  CrossEntropySpec spec;
  int64_t k, classes;
  DType pred_dtype, target_dtype;
  double coef;
};

void cross_entropy_stats_cpu(const CrossEntropyStats& args);
void cross_entropy_stats2_cpu(const CrossEntropyStats2& args);
void cross_entropy_loss_sum_cpu(const CrossEntropyLossSum& args);
void cross_entropy_row_losses_cpu(const CrossEntropyRowLosses& args);
void cross_entropy_grad_cpu(const CrossEntropyGrad& args);

inline KernelOp<void(const CrossEntropyStats&)> cross_entropy_stats{"cross_entropy_stats",
                                                                    &cross_entropy_stats_cpu};
inline KernelOp<void(const CrossEntropyStats2&)> cross_entropy_stats2{"cross_entropy_stats2",
                                                                      &cross_entropy_stats2_cpu};
inline KernelOp<void(const CrossEntropyLossSum&)> cross_entropy_loss_sum{
    "cross_entropy_loss_sum", &cross_entropy_loss_sum_cpu};
inline KernelOp<void(const CrossEntropyRowLosses&)> cross_entropy_row_losses{
    "cross_entropy_row_losses", &cross_entropy_row_losses_cpu};
inline KernelOp<void(const CrossEntropyGrad&)> cross_entropy_grad{"cross_entropy_grad",
                                                                  &cross_entropy_grad_cpu};

}  // namespace meshlayout
