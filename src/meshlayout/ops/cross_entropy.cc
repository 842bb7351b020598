// cross_entropy.cc — see cross_entropy.h, NOTE [Vocab-parallel cross-entropy].
#include "meshlayout/ops/cross_entropy.h"

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

Array sparse_categorical_crossentropy_values(const Array& logits, const Array& labels) {
  const Stats st = compute_stats(spec_of(true, {}), logits, labels, {});
  Array out = allocate_agreed(st.targets.layout(), st.targets.shape(), logits.dtype(),
                              logits.runtime_ptr());
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    const double* p = data<double>(*st.rows->shard_at(o.position));
    const int64_t rows = o.box.num_elements();
    for (int64_t r = 0; r < rows; ++r) {
      const double v = row_loss(st, p + r * 4 * st.k, nullptr);
      if (logits.dtype() == DType::kF32) {
        data<float>(o)[r] = static_cast<float>(v);
      } else {
        data<double>(o)[r] = v;
      }
    }
  });
  return out;
}

double categorical_crossentropy(const Array& y_pred, const Array& targets, const CrossEntropyOptions& options) {
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

}  // namespace meshlayout
