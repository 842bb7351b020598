// cross_entropy_stats.cc — see cross_entropy_stats.h and cross_entropy.h, NOTE [Vocab-parallel
// cross-entropy].
#include "meshlayout/ops/cross_entropy_stats.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"

namespace meshlayout::cross_entropy_internal {
Spec spec_of(bool sparse, const CrossEntropyOptions& o) {
  return {{sparse, o.from_logits, o.label_smoothing}};
}

namespace {

Shape lead_shape(const Array& x) { return Shape(x.shape().begin(), x.shape().end() - 1); }

std::vector<DimSharding> lead_axes(const Array& x) {
  return std::vector<DimSharding>(x.layout().axes().begin(), x.layout().axes().end() - 1);
}

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF64; }

}  // namespace

void check_inputs(const Spec& sp, const Array& pred, const Array& targets,
                  const CrossEntropyOptions& options) {
  const std::string_view op = sp.op(), what = sp.pred();
  if (!is_float(pred.dtype())) {
    throw ValueError(fmt::format("{}: {} must be F32 or F64, got {} {} of shape {}", op, what,
                                 dtype_name(pred.dtype()), what, shape_to_string(pred.shape())));
  }
  if (pred.shape().empty()) {
    throw ValueError(
        fmt::format("{}: {} need a class dimension (…, classes), got shape ()", op, what));
  }
  if (sp.sparse) {
    if (targets.dtype() != DType::kI32 && targets.dtype() != DType::kI64) {
      throw ValueError(
          fmt::format("{}: labels must be integer class indices (I32 or I64), got {} "
                      "labels of shape {}",
                      op, dtype_name(targets.dtype()), shape_to_string(targets.shape())));
    }
    if (targets.shape() != lead_shape(pred)) {
      throw ValueError(
          fmt::format("{}: labels of shape {} must have the shape of {} {} without its last "
                      "(class) dimension, {}",
                      op, shape_to_string(targets.shape()), what, shape_to_string(pred.shape()),
                      shape_to_string(lead_shape(pred))));
    }
    if (options.label_smoothing != 0.0) {
      throw ValueError(
          fmt::format("{}: label_smoothing must be 0 (Keras' SparseCategoricalCrossentropy has "
                      "none), got {}",
                      op, options.label_smoothing));
    }
  } else {
    if (!is_float(targets.dtype())) {
      throw ValueError(
          fmt::format("{}: targets must be F32 or F64 (one-hot or probability rows), got {} "
                      "targets of shape {}",
                      op, dtype_name(targets.dtype()), shape_to_string(targets.shape())));
    }
    if (targets.shape() != pred.shape()) {
      throw ValueError(fmt::format("{}: targets of shape {} must have the shape of {} {}", op,
                                   shape_to_string(targets.shape()), what,
                                   shape_to_string(pred.shape())));
    }
    if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0)) {
      throw ValueError(fmt::format("{}: label_smoothing must be in [0, 1], got {}", op,
                                   options.label_smoothing));
    }
  }
  if (!std::isfinite(options.grad_scale)) {
    throw ValueError(fmt::format("{}: grad_scale must be finite, got {}", op, options.grad_scale));
  }
}

namespace {

// The message of a bad input a device found.
std::string failure_message(const Spec& sp, const CrossEntropyFailure& f, const Shape& pred_shape) {
  const int64_t V = pred_shape.back();
  if (f.kind == 0) {
    return fmt::format(
        "{}: label {} at labels[{}] is outside [0, {}): V = {} is the last dimension "
        "of {} {}",
        sp.op(), f.label, fmt::join(f.at, ", "), V, V, sp.pred(), shape_to_string(pred_shape));
  }
  return fmt::format("{}: {}[{}] is {}; the {} must be finite", sp.op(), sp.pred(),
                     fmt::join(f.at, ", "), f.value, sp.pred());
}

// First round: each device's (…, 1 block, width) statistics of its box.
void local_stats(const Array& pred, Stats& st, Array& out,
                 std::vector<std::optional<CrossEntropyFailure>>& failures) {
  const DeviceKind kind = kind_of(pred);
  pred.runtime().pool().parallel_for(pred.local_shards().size(), [&](size_t i) {
    const Array::Shard& xs = pred.local_shards()[i];
    cross_entropy_stats(kind, {.pred = &xs,
                               .targets = st.targets.shard_at(xs.position),
                               .stats = out.shard_at(xs.position),
                               .spec = st.spec,
                               .pred_shape = &pred.shape(),
                               .pred_dtype = pred.dtype(),
                               .target_dtype = st.targets.dtype(),
                               .failure = &failures[i]});
  });
}

// Categorical probabilities, second round: per block the partial loss Σ −t·log clip(p/S) and
// the in-band Σ t, S from the first round.
void local_stats2(const Array& pred, const Stats& st, Array& out) {
  const DeviceKind kind = kind_of(pred);
  pred.runtime().pool().parallel_for(pred.local_shards().size(), [&](size_t i) {
    const Array::Shard& xs = pred.local_shards()[i];
    cross_entropy_stats2(kind, {.pred = &xs,
                                .targets = st.targets.shard_at(xs.position),
                                .stats1 = st.rows->shard_at(xs.position),
                                .out = out.shard_at(xs.position),
                                .spec = st.spec,
                                .k = st.k,
                                .classes = st.classes,
                                .pred_dtype = pred.dtype(),
                                .target_dtype = st.targets.dtype()});
  });
}

// (…, k, w) statistics with the k blocks split like y_pred's classes.
Array allocate_stats(const Array& pred, int64_t k, int64_t w) {
  Shape shape = lead_shape(pred);
  shape.push_back(k);
  shape.push_back(w);
  std::vector<DimSharding> axes = lead_axes(pred);
  axes.push_back(pred.layout().axes().back());
  axes.push_back(None);
  return allocate_agreed(TensorLayout(axes, pred.mesh()), shape, DType::kF64, pred.runtime_ptr());
}

// The statistics replicated over the class axes: the small all-gather.
Array gather_blocks(Array local, const Array& pred) {
  std::vector<DimSharding> axes = lead_axes(pred);
  axes.push_back(None);
  axes.push_back(None);
  const TensorLayout gathered(axes, pred.mesh());
  return local.layout() == gathered ? std::move(local) : distribute_tensor(local, gathered);
}

}  // namespace

Stats compute_stats(const Spec& sp, const Array& pred, const Array& targets_in,
                    const CrossEntropyOptions& options) {
  check_inputs(sp, pred, targets_in, options);
  const auto rt = pred.runtime_ptr();
  const int vd = pred.geometry().rank() - 1;
  Stats st{.spec = sp,
           .targets = distribute_tensor(
               targets_in, sp.sparse ? TensorLayout(lead_axes(pred), pred.mesh()) : pred.layout()),
           .rows = std::nullopt,
           .rows2 = std::nullopt,
           .k = pred.geometry().num_blocks(vd),
           .classes = pred.shape().back(),
           .positions = num_elements(lead_shape(pred))};
  Array local = allocate_stats(pred, st.k, sp.width());

  // Local pass; a bad input (or any failure) is agreed before the statistics move.
  std::exception_ptr error;
  try {
    std::vector<std::optional<CrossEntropyFailure>> failures(pred.local_shards().size());
    local_stats(pred, st, local, failures);
    std::optional<CrossEntropyFailure> first;
    for (auto& f : failures) {
      if (f && (!first || f->before(*first))) first = std::move(*f);
    }
    if (first) {
      error = std::make_exception_ptr(ValueError(failure_message(sp, *first, pred.shape())));
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (rt->num_processes() > 1) {
    agree_on_failure(rt->comm(), error);
  } else if (error) {
    std::rethrow_exception(error);
  }
  st.rows = gather_blocks(std::move(local), pred);
  if (sp.two_rounds()) {
    Array local2 = allocate_stats(pred, st.k, 2);
    local_stats2(pred, st, local2);
    st.rows2 = gather_blocks(std::move(local2), pred);
  }
  return st;
}

double reduce_loss(const Stats& st, const Array& pred, const CrossEntropyOptions& options) {
  double local = 0;
  const DeviceKind kind = kind_of(pred);
  for (const Array::Shard& s : st.rows->local_shards()) {
    if (st.rows->geometry().replica_of(s.position) != 0) continue;
    cross_entropy_loss_sum(
        kind, {.stats1 = &s,
               .stats2 = st.spec.two_rounds() ? st.rows2->shard_at(s.position) : nullptr,
               .spec = st.spec,
               .k = st.k,
               .total = &local});
  }
  const double total = sum_in_rank_order(pred.runtime().comm(), local);
  if (options.reduction == LossReduction::kSum) return total;
  return st.positions == 0 ? 0.0 : total / static_cast<double>(st.positions);
}

Array row_losses(const Stats& st, const Array& pred) {
  Array out = allocate_agreed(TensorLayout(lead_axes(pred), pred.mesh()), lead_shape(pred),
                              pred.dtype(), pred.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    cross_entropy_row_losses(
        kind, {.out = &o,
               .stats1 = st.rows->shard_at(o.position),
               .stats2 = st.spec.two_rounds() ? st.rows2->shard_at(o.position) : nullptr,
               .spec = st.spec,
               .k = st.k,
               .dtype = pred.dtype()});
  });
  return out;
}

Array backward_from(const Stats& st, const Array& pred, const CrossEntropyOptions& options) {
  Array grad = allocate_agreed(pred.layout(), pred.shape(), pred.dtype(), pred.runtime_ptr());
  const double n = options.reduction == LossReduction::kSum || st.positions == 0
                       ? 1.0
                       : static_cast<double>(st.positions);
  const double coef = options.grad_scale / n;
  const DeviceKind kind = kind_of(grad);
  grad.runtime().pool().parallel_for(grad.local_shards().size(), [&](size_t i) {
    Array::Shard& gs = grad.local_shards()[i];
    cross_entropy_grad(kind,
                       {.grad = &gs,
                        .pred = pred.shard_at(gs.position),
                        .targets = st.targets.shard_at(gs.position),
                        .stats1 = st.rows->shard_at(gs.position),
                        .stats2 = st.spec.two_rounds() ? st.rows2->shard_at(gs.position) : nullptr,
                        .spec = st.spec,
                        .k = st.k,
                        .classes = st.classes,
                        .pred_dtype = pred.dtype(),
                        .target_dtype = st.targets.dtype(),
                        .coef = coef});
  });
  return grad;
}

}  // namespace meshlayout::cross_entropy_internal
