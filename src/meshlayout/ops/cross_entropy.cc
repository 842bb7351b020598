// cross_entropy.cc — see cross_entropy.h, NOTE [Vocab-parallel cross-entropy].
#include "meshlayout/ops/cross_entropy.h"

#include <vector>

#include "meshlayout/ops/cross_entropy_stats.h"

namespace meshlayout {

using cross_entropy_internal::backward_from;
using cross_entropy_internal::compute_stats;
using cross_entropy_internal::data;
using cross_entropy_internal::reduce_loss;
using cross_entropy_internal::row_loss;
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

// The loss of every row (row_loss, as reduce_loss sums them) in y_pred's dtype, laid out as
// y_pred without the class dimension. Local.
Array values_from(const Stats& st, const Array& pred) {
  const std::vector<DimSharding> axes(pred.layout().axes().begin(), pred.layout().axes().end() - 1);
  const Shape shape(pred.shape().begin(), pred.shape().end() - 1);
  Array out =
      allocate_agreed(TensorLayout(axes, pred.mesh()), shape, pred.dtype(), pred.runtime_ptr());
  const int64_t w1 = st.spec.width();
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    const double* p = data<double>(*st.rows->shard_at(o.position));
    const double* p2 =
        st.spec.two_rounds() ? data<double>(*st.rows2->shard_at(o.position)) : nullptr;
    const int64_t rows = o.box.num_elements();
    for (int64_t r = 0; r < rows; ++r) {
      const double v = row_loss(st, p + r * w1 * st.k, p2 ? p2 + r * 2 * st.k : nullptr);
      if (pred.dtype() == DType::kF32) {
        data<float>(o)[r] = static_cast<float>(v);
      } else {
        data<double>(o)[r] = v;
      }
    }
  });
  return out;
}

}  // namespace

Array sparse_categorical_crossentropy_values(const Array& logits, const Array& labels,
                                             const CrossEntropyOptions& options) {
  const CrossEntropyOptions o = values_options(options);
  const Stats st = compute_stats(spec_of(true, o), logits, labels, o);
  return values_from(st, logits);
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
  return values_from(st, y_pred);
}

}  // namespace meshlayout
