// cross_entropy.h — categorical and sparse categorical cross-entropy on distributed arrays,
// forward and backward, as keras.losses.CategoricalCrossentropy / SparseCategoricalCrossentropy
// with the default reduction "sum_over_batch_size" (the mean over every position: all leading
// indices) or "sum", or reduction "none" (the *_values functions: the loss of every position),
// from logits (log_softmax) or from probabilities (from_logits=false: each row divided
// by its sum, clipped to [1e-7, 1 − 1e-7], then −Σ t·log), for predictions in ANY layout —
// vocab-parallel (Megatron), rows over a data axis, both, or replicated — without ever gathering
// a row of the predictions.
//
// NOTE [Vocab-parallel cross-entropy]
// y_pred (…, V) F32/F64; sparse labels (…) I32/I64, categorical targets (…, V) F32/F64 (brought
// to y_pred's layout: a reshard of the targets only). Each device reads only its box: for each
// of its rows it computes per-row partial statistics over its class block [v0, v1):
//   from logits: the local max m, s = Σ exp(x − m), T = Σ t and U = Σ t·x (sparse: t is the
//     one-hot of the label, so T = 1 and U = x[label] on the label's owner, 0 elsewhere);
//   from probabilities: s = Σ p and (sparse) P = p[label] on the label's owner.
// These (…, k, w) float64 arrays for k class blocks — the rows' layout with the k blocks split
// like the classes — are brought to the devices of every class block of the same rows by one
// small reshard (an all-gather over the class axes of 8·w bytes per row and block: nothing of
// size V moves). Each device combines them in block order (bit-identical on every replica):
//   logits: M = max m_b, S = Σ s_b·exp(m_b − M), lse = M + log S, loss(row) = lse·T − U;
//   sparse probabilities: loss(row) = −log clip(P / S);
//   categorical probabilities: a second round of the same kind carries, per block, the partial
//     loss Σ −t·log clip(p/S) and B = Σ t over the classes whose p/S is inside the clip band.
// The scalar sums each row once (replica 0 of the row blocks), per process, then across
// processes in rank order, and divides by the number of positions. The backward is local, in
// y_pred's layout (N positions, c = grad_scale / N for the mean):
//   logits: (softmax(x)·T − t)·c;
//   probabilities: with q = p/S, g_j = −t_j/q_j inside the band [ε, 1 − ε] and 0 outside (the
//     clip's gradient), d loss/d p_k = (g_k + B)/S·c, B = Σ_{j in band} t_j — exactly the chain
//     rule through the normalisation and the clip.
// label_smoothing (categorical only, in [0, 1]): t ← t·(1 − ls) + ls/V, as Keras, applied on
// the fly. Memory per device: its gradient box (backward), the targets' box (categorical) plus
// O(rows · k) statistics.
//
// Checks: y_pred F32/F64 of rank ≥ 1; sparse labels I32/I64 of y_pred's shape without the last
// dimension (Keras' squeeze of a trailing 1 is not done: pass (…) labels); categorical targets
// F32/F64 of y_pred's shape; label_smoothing in [0, 1] and 0 for the sparse loss (Keras has none)
// — ValueError naming the value, on every process before any communication. A label outside
// [0, V) (Keras silently gives loss 0) and a non-finite prediction (NaN or ±inf) are ValueErrors
// naming the value and its index; they are found by the devices holding them and agreed across
// processes (agree_on_failure), so every process throws the same error (under mpirun prefixed
// "rank <r>: "). The lowest index is reported, labels before predictions. Probabilities are not
// checked further: a row summing to 0 gives NaN, as in Keras.
//
// Example:
//   DeviceMesh mesh({2, 4}, {"data", "model"});
//   Array logits = distribute_tensor(x, TensorLayout({"data", None, "model"}, mesh)); // (B,T,V)
//   Array labels = distribute_tensor(y, TensorLayout({"data", None}, mesh));          // (B,T)
//   double loss = sparse_categorical_crossentropy(logits, labels);     // same on every process
//   auto [l, dlogits] = sparse_categorical_crossentropy_with_grad(logits, labels);
//   dlogits.layout() == logits.layout();
//   Array onehot = …;                                                  // (B,T,V), any layout
//   auto [c, dprobs] = categorical_crossentropy_with_grad(softmax_out, onehot, {.from_logits =
//   false}); Array per_pos = categorical_crossentropy_values(softmax_out, onehot, {.from_logits =
//   false}); // (B,T)
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
  /// y_pred are logits (log_softmax) or probabilities (normalised by the row sum, clipped to
  /// [1e-7, 1 − 1e-7]). Keras' default is false; these ops default to logits (the losses of
  /// train/losses.h pass Keras' value).
  bool from_logits = true;
  /// Categorical only: targets become t·(1 − ls) + ls/V. A nonzero value for the sparse loss is
  /// a ValueError (SparseCategoricalCrossentropy has no label smoothing).
  double label_smoothing = 0.0;
};

/// The reduced loss, as a double equal on every process (0 when there are no positions).
/// Collective. Errors: see the header comment.
double sparse_categorical_crossentropy(const Array& logits, const Array& labels,
                                       const CrossEntropyOptions& options = {});

/// d loss / d y_pred in y_pred's layout and dtype: from logits (softmax − onehot) · grad_scale / N
/// (N = the number of positions for kSumOverBatchSize, 1 for kSum); from probabilities see the
/// NOTE. Collective.
Array sparse_categorical_crossentropy_backward(const Array& logits, const Array& labels,
                                               const CrossEntropyOptions& options = {});

struct CrossEntropyResult {
  double loss;
  Array dlogits;  // d loss / d y_pred (logits or probabilities)
};

/// Both at the cost of one forward (the statistics are shared). Collective.
CrossEntropyResult sparse_categorical_crossentropy_with_grad(
    const Array& logits, const Array& labels, const CrossEntropyOptions& options = {});

/// The per-position losses, keras.losses.SparseCategoricalCrossentropy(reduction="none"): (…) in
/// y_pred's dtype, laid out as y_pred without the class dimension; their mean is the reduced loss.
/// From logits or probabilities (options.from_logits); reduction and grad_scale do not apply; a
/// nonzero label_smoothing is refused as by the reduced loss. Collective.
Array sparse_categorical_crossentropy_values(const Array& logits, const Array& labels,
                                             const CrossEntropyOptions& options = {});

/// keras.losses.categorical_crossentropy reduced: targets (…, V) F32/F64 of y_pred's shape (one-hot
/// or probability rows), any layout (resharded to y_pred's). Collective; equal on every process.
double categorical_crossentropy(const Array& y_pred, const Array& targets,
                                const CrossEntropyOptions& options = {});

/// d loss / d y_pred in y_pred's layout and dtype (see the NOTE). Collective.
Array categorical_crossentropy_backward(const Array& y_pred, const Array& targets,
                                        const CrossEntropyOptions& options = {});

/// The per-position losses, keras.losses.CategoricalCrossentropy(reduction="none"): (…) in
/// y_pred's dtype, laid out as y_pred without the class dimension; their mean is the reduced loss.
/// from_logits and label_smoothing as the reduced loss; reduction and grad_scale do not apply.
/// Collective.
Array categorical_crossentropy_values(const Array& y_pred, const Array& targets,
                                      const CrossEntropyOptions& options = {});

/// Both, sharing the statistics. Collective.
CrossEntropyResult categorical_crossentropy_with_grad(const Array& y_pred, const Array& targets,
                                                      const CrossEntropyOptions& options = {});

}  // namespace meshlayout
