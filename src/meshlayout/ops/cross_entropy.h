// cross_entropy.h — sparse categorical cross-entropy from logits on distributed arrays, forward
// and backward: keras.losses.SparseCategoricalCrossentropy(from_logits=True) with the default
// reduction "sum_over_batch_size" (the mean over every label position), for logits in ANY
// layout — vocab-parallel (Megatron), rows over a data axis, both, or replicated — without
// ever gathering the logits.
//
// NOTE [Vocab-parallel cross-entropy]
// logits (…, V) F32/F64, labels (…) I32/I64. Each device reads only its logits box: for each of
// its rows it computes, over its vocab block [v0, v1), the local max m, the local
// sum s = Σ exp(x − m) and the target logit t (x[label] if label ∈ [v0, v1), else 0). These
// (m, s, t) triples — a (…, k, 3) float64 array for k vocab blocks, the logits' row layout with
// the k blocks split like the vocab — are brought to the devices of every vocab block of the
// same rows by one small reshard (an all-gather over the vocab axes of 24 bytes per row and
// block: nothing of size V moves). Each device then combines them in block order, the
// max-then-sum of Megatron in one round: M = max m_b, S = Σ s_b·exp(m_b − M), T = Σ t_b
// (only the owner of the label adds a non-zero t), so every replica gets bit-identical values.
// loss(row) = M + log S − T. The scalar sums each row once (the devices of replica 0 of the row
// blocks), per process, then across processes in rank order, and divides by the number of
// positions. The backward is local: dlogits = (exp(x − M − log S) − onehot) · scale / N in the
// logits' own layout; the one-hot lands only on the device whose vocab block holds the label.
// Memory per device: its dlogits box (backward) plus O(rows · k) statistics.
//
// Checks: logits F32/F64, labels I32/I64 of logits' shape without the last dimension (Keras'
// squeeze of a trailing 1 is not done: pass (…) labels) — ValueError naming both shapes/dtypes,
// on every process before any communication. A label outside [0, V) (Keras silently gives loss
// 0) and a non-finite logit (NaN or ±inf) are ValueErrors naming the value and its index; they
// are found by the devices holding them and agreed across processes (agree_on_failure), so
// every process throws the same error (under mpirun prefixed "rank <r>: "). The lowest index
// is reported, labels before logits.
//
// Example:
//   DeviceMesh mesh({2, 4}, {"data", "model"});
//   Array logits = distribute_tensor(x, TensorLayout({"data", None, "model"}, mesh)); // (B,T,V)
//   Array labels = distribute_tensor(y, TensorLayout({"data", None}, mesh));          // (B,T)
//   double loss = sparse_categorical_crossentropy(logits, labels);     // same on every process
//   auto [l, dlogits] = sparse_categorical_crossentropy_with_grad(logits, labels);
//   dlogits.layout() == logits.layout();
#pragma once

#include "meshlayout/array/array.h"

namespace meshlayout {

enum class LossReduction {
  kSumOverBatchSize,  // Keras' default: the sum divided by the number of label positions
  kSum,
};

struct CrossEntropyOptions {
  LossReduction reduction = LossReduction::kSumOverBatchSize;
  /// The backward multiplies dlogits by this (the gradient flowing into the loss).
  double grad_scale = 1.0;
};

/// The reduced loss, as a double equal on every process (0 when there are no positions).
/// Collective. Errors: see the header comment.
double sparse_categorical_crossentropy(const Array& logits, const Array& labels,
                                       const CrossEntropyOptions& options = {});

/// d loss / d logits in logits' layout and dtype: (softmax − onehot) · grad_scale / N (N = the
/// number of positions for kSumOverBatchSize, 1 for kSum). Collective.
Array sparse_categorical_crossentropy_backward(const Array& logits, const Array& labels,
                                               const CrossEntropyOptions& options = {});

struct CrossEntropyResult {
  double loss;
  Array dlogits;
};

/// Both at the cost of one forward (the statistics are shared). Collective.
CrossEntropyResult sparse_categorical_crossentropy_with_grad(const Array& logits,
                                                             const Array& labels,
                                                             const CrossEntropyOptions& options = {});

/// The per-position losses (Keras reduction="none"): (…) in logits' dtype, laid out as logits
/// without the vocab dimension. Collective.
Array sparse_categorical_crossentropy_values(const Array& logits, const Array& labels);

}  // namespace meshlayout
