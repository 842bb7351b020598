// cross_entropy_stats.h — the machinery behind cross_entropy.h's entry points (NOTE
// [Vocab-parallel cross-entropy]): the argument checks, which loss (Spec), the per-row
// vocab-parallel statistics of every class block (Stats, compute_stats), the reduced loss, the
// per-row losses and the gradient, each device's share computed by kernels/cross_entropy.h.
// Internal to cross_entropy.cc (implemented in cross_entropy_stats.cc); not part of the ops API.
//
// Example:
//   const Stats st = compute_stats(spec_of(/*sparse=*/true, options), logits, labels, options);
//   double loss = reduce_loss(st, logits, options);   // collective, equal on every process
//   Array dlogits = backward_from(st, logits, options);
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/cross_entropy.h"
#include "meshlayout/ops/cross_entropy.h"

namespace meshlayout::cross_entropy_internal {

// Which loss, and how y_pred is read (the kernels' CrossEntropySpec), with the names messages use.
struct Spec : CrossEntropySpec {
  std::string_view op() const {
    return sparse ? "sparse_categorical_crossentropy" : "categorical_crossentropy";
  }
  std::string_view pred() const { return from_logits ? "logits" : "probabilities"; }
};

Spec spec_of(bool sparse, const CrossEntropyOptions& o);

// The checks of the arguments (see cross_entropy.h), ValueError before any communication;
// compute_stats runs them first.
void check_inputs(const Spec& sp, const Array& pred, const Array& targets,
                  const CrossEntropyOptions& options);

// Everything the loss and the gradient read besides y_pred: the targets in the rows' layout
// (sparse) or y_pred's (categorical), and the per-row statistics of every class block,
// replicated over the class axes.
struct Stats {
  Spec spec;
  Array targets;
  std::optional<Array> rows;   // F64 (…, k, width), layout (lead axes…, None, None)
  std::optional<Array> rows2;  // categorical probabilities: (…, k, 2) partial loss and in-band Σt
  int64_t k = 0;
  int64_t classes = 0;
  int64_t positions = 0;
};

// The statistics of every row: checks the arguments, then the local pass and the small
// all-gather over the class axes (a second round for categorical probabilities). Collective;
// a bad label or a non-finite prediction is a ValueError on every process.
Stats compute_stats(const Spec& sp, const Array& pred, const Array& targets_in,
                    const CrossEntropyOptions& options);

// The loss of every row (as reduce_loss sums them) in y_pred's dtype, laid out as y_pred without
// the class dimension. Local.
Array row_losses(const Stats& st, const Array& pred);

// The loss summed over every position (replica 0 of each row), then over processes in rank
// order, and reduced as options.reduction says. Collective; equal on every process.
double reduce_loss(const Stats& st, const Array& pred, const CrossEntropyOptions& options);

// d loss / d y_pred in y_pred's layout and dtype, scaled by grad_scale (divided by the number of
// positions for kSumOverBatchSize). Local.
Array backward_from(const Stats& st, const Array& pred, const CrossEntropyOptions& options);

}  // namespace meshlayout::cross_entropy_internal
