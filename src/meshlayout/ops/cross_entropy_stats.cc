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

namespace meshlayout::cross_entropy_internal {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEpsilon = 1e-7;  // keras.config.epsilon()

}  // namespace

Spec spec_of(bool sparse, const CrossEntropyOptions& o) {
  return {sparse, o.from_logits, o.label_smoothing};
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

int64_t label_at(const Array::Shard& s, DType dtype, int64_t i) {
  return dtype == DType::kI32 ? data<int32_t>(s)[i] : data<int64_t>(s)[i];
}

double float_at(const Array::Shard& s, DType dtype, int64_t i) {
  return dtype == DType::kF32 ? static_cast<double>(data<float>(s)[i]) : data<double>(s)[i];
}

double clip(double q) { return std::min(std::max(q, kEpsilon), 1.0 - kEpsilon); }
// Inside the band the clip passes the gradient; outside it is constant.
bool in_band(double q) { return q >= kEpsilon && q <= 1.0 - kEpsilon; }

// The global coordinates of local row `row` of a box's leading dims (the last dim excluded
// when `dims` is one less than the box's rank).
Shape row_coords(const Box& box, size_t dims, int64_t row) {
  Shape c(dims);
  for (size_t d = dims; d-- > 0;) {
    c[d] = box.offset[d] + row % box.shape[d];
    row /= box.shape[d];
  }
  return c;
}

int64_t ravel(const Shape& coords, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + coords[d];
  return flat;
}

// A bad input one device found; the lowest (kind, flat index) wins.
struct Failure {
  int kind = 0;  // 0: label out of range, 1: non-finite prediction
  int64_t flat = 0;
  std::string message;
  bool before(const Failure& o) const { return kind != o.kind ? kind < o.kind : flat < o.flat; }
};

void keep_first(std::optional<Failure>& slot, Failure f) {
  if (!slot || f.before(*slot)) slot = std::move(f);
}

// The target of class j (global index) of local element i of the targets' box.
double target(const Stats& st, const Array::Shard& ts, int64_t row, int64_t label_or_i, int64_t j) {
  if (st.spec.sparse) return label_at(ts, st.targets.dtype(), row) == j ? 1.0 : 0.0;
  const double t = float_at(ts, st.targets.dtype(), label_or_i);
  return st.spec.smoothing == 0.0
             ? t
             : t * (1.0 - st.spec.smoothing) + st.spec.smoothing / static_cast<double>(st.classes);
}

// A row's combined first-round statistics, in block order.
struct Row {
  double lse = 0;  // logits: log Σ exp(x)
  double sum = 0;  // probabilities: Σ p
  double t = 0;    // logits: Σ t; sparse probabilities: p[label]
  double u = 0;    // logits: Σ t·x
};

Row combine(const Spec& sp, const double* st, int64_t k) {
  Row r;
  if (sp.from_logits) {
    double m = -kInf;
    for (int64_t b = 0; b < k; ++b) m = std::max(m, st[4 * b]);
    double s = 0;
    for (int64_t b = 0; b < k; ++b) {
      if (st[4 * b + 1] > 0) s += st[4 * b + 1] * std::exp(st[4 * b] - m);
      r.t += st[4 * b + 2];
      r.u += st[4 * b + 3];
    }
    r.lse = m + std::log(s);
  } else {
    for (int64_t b = 0; b < k; ++b) {
      r.sum += st[2 * b];
      r.t += st[2 * b + 1];
    }
  }
  return r;
}

}  // namespace

// The loss of one row from its combined statistics.
double row_loss(const Stats& st, const double* s1, const double* s2) {
  if (st.spec.two_rounds()) {
    double l = 0;
    for (int64_t b = 0; b < st.k; ++b) l += s2[2 * b];
    return l;
  }
  const Row r = combine(st.spec, s1, st.k);
  if (st.spec.from_logits) return r.lse * r.t - r.u;
  return -std::log(clip(r.t / r.sum));
}

namespace {

// First round: each device's (…, 1 block, width) statistics of its box.
template <typename T>
void local_stats(const Array& pred, Stats& st, Array& out,
                 std::vector<std::optional<Failure>>& failures) {
  const Spec& sp = st.spec;
  const int64_t V = pred.shape().back();
  const size_t lead = pred.shape().size() - 1;
  const Shape lshape = lead_shape(pred);
  const int64_t w = sp.width();
  pred.runtime().pool().parallel_for(pred.local_shards().size(), [&](size_t i) {
    const Array::Shard& xs = pred.local_shards()[i];
    const Array::Shard& ts = *st.targets.shard_at(xs.position);
    Array::Shard& ss = *out.shard_at(xs.position);
    const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
    const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
    const T* x = data<T>(xs);
    double* o = data<double>(ss);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * nv;
      int64_t label = -1;
      if (sp.sparse) {
        label = label_at(ts, st.targets.dtype(), r);
        if (label < 0 || label >= V) {
          const Shape at = row_coords(xs.box, lead, r);
          keep_first(failures[i],
                     {0, ravel(at, lshape),
                      fmt::format("{}: label {} at labels[{}] is outside [0, {}): V = {} "
                                  "is the last dimension of {} {}",
                                  sp.op(), label, fmt::join(at, ", "), V, V, sp.pred(),
                                  shape_to_string(pred.shape()))});
        }
      }
      double m = -kInf;
      bool finite = true;
      for (int64_t j = 0; j < nv; ++j) {
        const double v = static_cast<double>(row[j]);
        if (!std::isfinite(v)) {
          Shape at = row_coords(xs.box, lead, r);
          at.push_back(v0 + j);
          keep_first(failures[i], {1, ravel(at, pred.shape()),
                                   fmt::format("{}: {}[{}] is {}; the {} must be finite", sp.op(),
                                               sp.pred(), fmt::join(at, ", "), v, sp.pred())});
          finite = false;
          break;
        }
        m = std::max(m, v);
      }
      const bool owner = label >= v0 && label < v0 + nv;
      double* out_row = o + r * w;
      if (sp.from_logits) {
        double s = 0, t = 0, u = 0;
        if (nv > 0 && finite) {
          for (int64_t j = 0; j < nv; ++j) s += std::exp(static_cast<double>(row[j]) - m);
          if (sp.sparse) {
            t = owner ? 1.0 : 0.0;
            u = owner ? static_cast<double>(row[label - v0]) : 0.0;
          } else {
            for (int64_t j = 0; j < nv; ++j) {
              const double tj = target(st, ts, r, r * nv + j, v0 + j);
              t += tj;
              u += tj * static_cast<double>(row[j]);
            }
          }
        }
        out_row[0] = nv > 0 ? m : -kInf;
        out_row[1] = s;
        out_row[2] = t;
        out_row[3] = u;
      } else {
        double s = 0;
        for (int64_t j = 0; j < nv; ++j) s += static_cast<double>(row[j]);
        out_row[0] = s;
        out_row[1] = owner ? static_cast<double>(row[label - v0]) : 0.0;
      }
    }
  });
}

// Categorical probabilities, second round: per block the partial loss Σ −t·log clip(p/S) and
// the in-band Σ t, S from the first round.
template <typename T>
void local_stats2(const Array& pred, const Stats& st, Array& out) {
  const size_t lead = pred.shape().size() - 1;
  pred.runtime().pool().parallel_for(pred.local_shards().size(), [&](size_t i) {
    const Array::Shard& xs = pred.local_shards()[i];
    const Array::Shard& ts = *st.targets.shard_at(xs.position);
    const double* s1 = data<double>(*st.rows->shard_at(xs.position));
    double* o = data<double>(*out.shard_at(xs.position));
    const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
    const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
    const T* x = data<T>(xs);
    for (int64_t r = 0; r < rows; ++r) {
      const double sum = combine(st.spec, s1 + r * 2 * st.k, st.k).sum;
      double l = 0, band = 0;
      for (int64_t j = 0; j < nv; ++j) {
        const double t = target(st, ts, r, r * nv + j, v0 + j);
        const double q = static_cast<double>(x[r * nv + j]) / sum;
        l -= t * std::log(clip(q));
        if (in_band(q)) band += t;
      }
      o[2 * r] = l;
      o[2 * r + 1] = band;
    }
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
    std::vector<std::optional<Failure>> failures(pred.local_shards().size());
    if (pred.dtype() == DType::kF32) {
      local_stats<float>(pred, st, local, failures);
    } else {
      local_stats<double>(pred, st, local, failures);
    }
    std::optional<Failure> first;
    for (auto& f : failures) {
      if (f) keep_first(first, std::move(*f));
    }
    if (first) error = std::make_exception_ptr(ValueError(first->message));
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
    if (pred.dtype() == DType::kF32) {
      local_stats2<float>(pred, st, local2);
    } else {
      local_stats2<double>(pred, st, local2);
    }
    st.rows2 = gather_blocks(std::move(local2), pred);
  }
  return st;
}

double reduce_loss(const Stats& st, const Array& pred, const CrossEntropyOptions& options) {
  double local = 0;
  const int64_t w1 = st.spec.width();
  for (const Array::Shard& s : st.rows->local_shards()) {
    if (st.rows->geometry().replica_of(s.position) != 0) continue;
    const int64_t rows = s.box.num_elements() / (w1 * st.k);
    const double* p = data<double>(s);
    const double* p2 =
        st.spec.two_rounds() ? data<double>(*st.rows2->shard_at(s.position)) : nullptr;
    for (int64_t r = 0; r < rows; ++r) {
      local += row_loss(st, p + r * w1 * st.k, p2 ? p2 + r * 2 * st.k : nullptr);
    }
  }
  const double total = sum_in_rank_order(pred.runtime().comm(), local);
  if (options.reduction == LossReduction::kSum) return total;
  return st.positions == 0 ? 0.0 : total / static_cast<double>(st.positions);
}

namespace {

template <typename T>
void fill_grad(const Stats& st, const Array& pred, double coef, Array& grad) {
  const size_t lead = pred.shape().size() - 1;
  const Spec& sp = st.spec;
  const int64_t w1 = sp.width();
  grad.runtime().pool().parallel_for(grad.local_shards().size(), [&](size_t i) {
    Array::Shard& gs = grad.local_shards()[i];
    const Array::Shard& xs = *pred.shard_at(gs.position);
    const Array::Shard& ts = *st.targets.shard_at(gs.position);
    const double* s1 = data<double>(*st.rows->shard_at(gs.position));
    const double* s2 = sp.two_rounds() ? data<double>(*st.rows2->shard_at(gs.position)) : nullptr;
    const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
    if (nv == 0) return;
    const int64_t rows = xs.box.num_elements() / nv;
    const T* x = data<T>(xs);
    T* g = data<T>(gs);
    for (int64_t r = 0; r < rows; ++r) {
      const Row row = combine(sp, s1 + r * w1 * st.k, st.k);
      const T* xr = x + r * nv;
      T* gr = g + r * nv;
      if (sp.from_logits) {
        for (int64_t j = 0; j < nv; ++j) {
          const double p = std::exp(static_cast<double>(xr[j]) - row.lse) * row.t;
          gr[j] = static_cast<T>((p - target(st, ts, r, r * nv + j, v0 + j)) * coef);
        }
      } else if (sp.sparse) {
        // g = (in band) (1 − [j = label]/q)/S, q = p[label]/S: 0 for the row outside the band.
        const int64_t label = label_at(ts, st.targets.dtype(), r);
        const double q = row.t / row.sum;
        const bool band = in_band(q);
        for (int64_t j = 0; j < nv; ++j) {
          const double d = band ? (1.0 - (v0 + j == label ? 1.0 / q : 0.0)) / row.sum : 0.0;
          gr[j] = static_cast<T>(d * coef);
        }
      } else {
        double b = 0;
        for (int64_t blk = 0; blk < st.k; ++blk) b += s2[r * 2 * st.k + 2 * blk + 1];
        for (int64_t j = 0; j < nv; ++j) {
          const double q = static_cast<double>(xr[j]) / row.sum;
          const double gj = in_band(q) ? -target(st, ts, r, r * nv + j, v0 + j) / q : 0.0;
          gr[j] = static_cast<T>((gj + b) / row.sum * coef);
        }
      }
    }
  });
}

}  // namespace

Array backward_from(const Stats& st, const Array& pred, const CrossEntropyOptions& options) {
  Array grad = allocate_agreed(pred.layout(), pred.shape(), pred.dtype(), pred.runtime_ptr());
  const double n = options.reduction == LossReduction::kSum || st.positions == 0
                       ? 1.0
                       : static_cast<double>(st.positions);
  const double coef = options.grad_scale / n;
  if (pred.dtype() == DType::kF32) {
    fill_grad<float>(st, pred, coef, grad);
  } else {
    fill_grad<double>(st, pred, coef, grad);
  }
  return grad;
}

}  // namespace meshlayout::cross_entropy_internal
