// cross_entropy.cc — see cross_entropy.h, NOTE [Vocab-parallel cross-entropy].
#include "meshlayout/ops/cross_entropy.h"

#include <vector>

#include "meshlayout/ops/cross_entropy_stats.h"

namespace meshlayout {

using cross_entropy_internal::backward_from;
using cross_entropy_internal::compute_stats;
using cross_entropy_internal::reduce_loss;
using cross_entropy_internal::row_losses;
using cross_entropy_internal::spec_of;
using cross_entropy_internal::Stats;

double sparse_categorical_crossentropy(const Array& logits, const Array& labels,
                                       const CrossEntropyOptions& options) {
  const Stats st = compute_stats(spec_of(true, options), logits, labels, options);
  return reduce_loss(st, logits, options);
}

Array sparse_categorical_crossentropy_backward(const Array& logits, const Array& labels,
                                               const CrossEntropyOptions& options) {
  const Stats st = compute_stats(spec_of(true, options), logits, labels, options);
  return backward_from(st, logits, options);
}

CrossEntropyResult sparse_categorical_crossentropy_with_grad(const Array& logits,
                                                             const Array& labels,
                                                             const CrossEntropyOptions& options) {
  const Stats st = compute_stats(spec_of(true, options), logits, labels, options);
  const double loss = reduce_loss(st, logits, options);
  return {loss, backward_from(st, logits, options)};
}

namespace {

// The options the per-position losses read: reduction and grad_scale do not apply to them (reset
// so that they are neither checked nor used); from_logits and label_smoothing are kept (a nonzero
// label_smoothing of the sparse loss is refused by check_inputs as for the reduced loss).
CrossEntropyOptions values_options(const CrossEntropyOptions& options) {
  return {.from_logits = options.from_logits, .label_smoothing = options.label_smoothing};
}

}  // namespace

Array sparse_categorical_crossentropy_values(const Array& logits, const Array& labels,
                                             const CrossEntropyOptions& options) {
  const CrossEntropyOptions o = values_options(options);
  const Stats st = compute_stats(spec_of(true, o), logits, labels, o);
  return row_losses(st, logits);
}

double categorical_crossentropy(const Array& y_pred, const Array& targets,
                                const CrossEntropyOptions& options) {
  const Stats st = compute_stats(spec_of(false, options), y_pred, targets, options);
  return reduce_loss(st, y_pred, options);
}

Array categorical_crossentropy_backward(const Array& y_pred, const Array& targets,
                                        const CrossEntropyOptions& options) {
  const Stats st = compute_stats(spec_of(false, options), y_pred, targets, options);
  return backward_from(st, y_pred, options);
}

CrossEntropyResult categorical_crossentropy_with_grad(const Array& y_pred, const Array& targets,
                                                      const CrossEntropyOptions& options) {
  const Stats st = compute_stats(spec_of(false, options), y_pred, targets, options);
  const double loss = reduce_loss(st, y_pred, options);
  return {loss, backward_from(st, y_pred, options)};
}

Array categorical_crossentropy_values(const Array& y_pred, const Array& targets,
                                      const CrossEntropyOptions& options) {
  const CrossEntropyOptions o = values_options(options);
  const Stats st = compute_stats(spec_of(false, o), y_pred, targets, o);
  return row_losses(st, y_pred);
}

}  // namespace meshlayout
