// cross_entropy.cc — see cross_entropy.h, NOTE [Vocab-parallel cross-entropy].
#include "meshlayout/ops/cross_entropy.h"

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

namespace meshlayout {
namespace {

constexpr std::string_view kOp = "sparse_categorical_crossentropy";
constexpr double kInf = std::numeric_limits<double>::infinity();

Shape lead_shape(const Array& logits) {
  return Shape(logits.shape().begin(), logits.shape().end() - 1);
}

std::vector<DimSharding> lead_axes(const Array& logits) {
  return std::vector<DimSharding>(logits.layout().axes().begin(), logits.layout().axes().end() - 1);
}

void check_inputs(const Array& logits, const Array& labels, const CrossEntropyOptions& options) {
  if (logits.dtype() != DType::kF32 && logits.dtype() != DType::kF64) {
    throw ValueError(fmt::format("{}: logits must be F32 or F64, got {} logits of shape {}", kOp,
                                 dtype_name(logits.dtype()), shape_to_string(logits.shape())));
  }
  if (labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) {
    throw ValueError(fmt::format("{}: labels must be integer class indices (I32 or I64), got {} "
                                 "labels of shape {}",
                                 kOp, dtype_name(labels.dtype()), shape_to_string(labels.shape())));
  }
  if (logits.shape().empty()) {
    throw ValueError(fmt::format("{}: logits need a class dimension (…, classes), got shape ()", kOp));
  }
  if (labels.shape() != lead_shape(logits)) {
    throw ValueError(fmt::format(
        "{}: labels of shape {} must have the shape of logits {} without its last (class) "
        "dimension, {}",
        kOp, shape_to_string(labels.shape()), shape_to_string(logits.shape()),
        shape_to_string(lead_shape(logits))));
  }
  if (!std::isfinite(options.grad_scale)) {
    throw ValueError(fmt::format("{}: grad_scale must be finite, got {}", kOp, options.grad_scale));
  }
}

int64_t label_at(const Array::Shard& s, DType dtype, int64_t i) {
  return dtype == DType::kI32 ? reinterpret_cast<const int32_t*>(s.buffer.data())[i]
                              : reinterpret_cast<const int64_t*>(s.buffer.data())[i];
}

template <typename T>
const T* data(const Array::Shard& s) { return reinterpret_cast<const T*>(s.buffer.data()); }
template <typename T>
T* data(Array::Shard& s) { return reinterpret_cast<T*>(s.buffer.data()); }

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
  int kind = 0;  // 0: label out of range, 1: non-finite logit
  int64_t flat = 0;
  std::string message;
  bool before(const Failure& o) const { return kind != o.kind ? kind < o.kind : flat < o.flat; }
};

void keep_first(std::optional<Failure>& slot, Failure f) {
  if (!slot || f.before(*slot)) slot = std::move(f);
}

// The combined statistics of one row from its k (max, sum, target) triples, in block order.
struct Row {
  double lse;     // log Σ exp(x)
  double target;  // x[label]
};

Row combine(const double* st, int64_t k) {
  double m = -kInf;
  for (int64_t b = 0; b < k; ++b) m = std::max(m, st[3 * b]);
  double s = 0, t = 0;
  for (int64_t b = 0; b < k; ++b) {
    if (st[3 * b + 1] > 0) s += st[3 * b + 1] * std::exp(st[3 * b] - m);
    t += st[3 * b + 2];
  }
  return {m + std::log(s), t};
}

// Labels in the rows' layout and the combined statistics (…, k, 3), replicated over the vocab
// axes: what every loss and gradient computation reads besides the logits themselves.
struct Stats {
  Array labels;
  Array rows;  // F64 (…, k, 3), layout (lead axes…, None, None)
  int64_t k;
  int64_t positions;
};

template <typename T>
void local_stats(const Array& logits, const Array& labels, Array& stats,
                 std::vector<std::optional<Failure>>& failures) {
  const int64_t V = logits.shape().back();
  const size_t lead = logits.shape().size() - 1;
  const Shape lshape = lead_shape(logits);
  logits.runtime().pool().parallel_for(logits.local_shards().size(), [&](size_t i) {
    const Array::Shard& xs = logits.local_shards()[i];
    const Array::Shard& ls = *labels.shard_at(xs.position);
    Array::Shard& ss = *stats.shard_at(xs.position);
    const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
    const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
    const T* x = data<T>(xs);
    double* out = data<double>(ss);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * nv;
      const int64_t label = label_at(ls, labels.dtype(), r);
      if (label < 0 || label >= V) {
        const Shape at = row_coords(xs.box, lead, r);
        keep_first(failures[i], {0, ravel(at, lshape),
                                 fmt::format("{}: label {} at labels[{}] is outside [0, {}): V = {} "
                                             "is the last dimension of logits {}",
                                             kOp, label, fmt::join(at, ", "), V, V,
                                             shape_to_string(logits.shape()))});
      }
      double m = -kInf;
      for (int64_t j = 0; j < nv; ++j) {
        const double v = static_cast<double>(row[j]);
        if (!std::isfinite(v)) {
          Shape at = row_coords(xs.box, lead, r);
          at.push_back(v0 + j);
          keep_first(failures[i], {1, ravel(at, logits.shape()),
                                   fmt::format("{}: logits[{}] is {}; the logits must be finite",
                                               kOp, fmt::join(at, ", "), v)});
          break;
        }
        m = std::max(m, v);
      }
      double s = 0;
      if (nv > 0 && std::isfinite(m)) {
        for (int64_t j = 0; j < nv; ++j) s += std::exp(static_cast<double>(row[j]) - m);
      }
      out[3 * r] = nv > 0 ? m : -kInf;
      out[3 * r + 1] = s;
      out[3 * r + 2] = label >= v0 && label < v0 + nv ? static_cast<double>(row[label - v0]) : 0.0;
    }
  });
}

Stats compute_stats(const Array& logits, const Array& labels_in, const CrossEntropyOptions& options) {
  check_inputs(logits, labels_in, options);
  const DeviceMesh& mesh = logits.mesh();
  const auto rt = logits.runtime_ptr();
  const int vd = logits.geometry().rank() - 1;
  const int64_t k = logits.geometry().num_blocks(vd);
  std::vector<DimSharding> axes = lead_axes(logits);
  Array labels = distribute_tensor(labels_in, TensorLayout(axes, mesh));

  Shape sshape = lead_shape(logits);
  sshape.push_back(k);
  sshape.push_back(3);
  std::vector<DimSharding> saxes = axes;
  saxes.push_back(logits.layout().axes()[static_cast<size_t>(vd)]);
  saxes.push_back(None);
  Array local = allocate_agreed(TensorLayout(saxes, mesh), sshape, DType::kF64, rt);

  // Local pass; a bad input (or any failure) is agreed before the statistics move.
  std::exception_ptr error;
  try {
    std::vector<std::optional<Failure>> failures(logits.local_shards().size());
    if (logits.dtype() == DType::kF32) {
      local_stats<float>(logits, labels, local, failures);
    } else {
      local_stats<double>(logits, labels, local, failures);
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

  saxes[static_cast<size_t>(vd)] = None;
  const TensorLayout gathered(saxes, mesh);
  Array rows = local.layout() == gathered ? std::move(local) : distribute_tensor(local, gathered);
  return Stats{std::move(labels), std::move(rows), k, num_elements(labels_in.shape())};
}

double reduce_loss(const Stats& st, const Array& logits, const CrossEntropyOptions& options) {
  double local = 0;
  for (const Array::Shard& s : st.rows.local_shards()) {
    if (st.rows.geometry().replica_of(s.position) != 0) continue;
    const int64_t rows = s.box.num_elements() / (3 * st.k);
    const double* p = data<double>(s);
    for (int64_t r = 0; r < rows; ++r) {
      const Row row = combine(p + r * 3 * st.k, st.k);
      local += row.lse - row.target;
    }
  }
  Runtime& rt = logits.runtime();
  double total = local;
  if (rt.num_processes() > 1) {
    std::vector<double> all(static_cast<size_t>(rt.num_processes()));
    rt.comm().all_gather(&local, sizeof local, all.data());
    total = 0;
    for (double v : all) total += v;  // rank order: the same sum on every process
  }
  if (options.reduction == LossReduction::kSum) return total;
  return st.positions == 0 ? 0.0 : total / static_cast<double>(st.positions);
}

template <typename T>
void fill_grad(const Stats& st, const Array& logits, double coef, Array& grad) {
  const size_t lead = logits.shape().size() - 1;
  grad.runtime().pool().parallel_for(grad.local_shards().size(), [&](size_t i) {
    Array::Shard& gs = grad.local_shards()[i];
    const Array::Shard& xs = *logits.shard_at(gs.position);
    const Array::Shard& ls = *st.labels.shard_at(gs.position);
    const double* stats = data<double>(*st.rows.shard_at(gs.position));
    const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
    if (nv == 0) return;
    const int64_t rows = xs.box.num_elements() / nv;
    const T* x = data<T>(xs);
    T* g = data<T>(gs);
    for (int64_t r = 0; r < rows; ++r) {
      const double lse = combine(stats + r * 3 * st.k, st.k).lse;
      const int64_t label = label_at(ls, st.labels.dtype(), r);
      for (int64_t j = 0; j < nv; ++j) {
        double p = std::exp(static_cast<double>(x[r * nv + j]) - lse);
        if (v0 + j == label) p -= 1.0;
        g[r * nv + j] = static_cast<T>(p * coef);
      }
    }
  });
}

Array backward_from(const Stats& st, const Array& logits, const CrossEntropyOptions& options) {
  Array grad = allocate_agreed(logits.layout(), logits.shape(), logits.dtype(), logits.runtime_ptr());
  const double n = options.reduction == LossReduction::kSum || st.positions == 0
                       ? 1.0
                       : static_cast<double>(st.positions);
  const double coef = options.grad_scale / n;
  if (logits.dtype() == DType::kF32) {
    fill_grad<float>(st, logits, coef, grad);
  } else {
    fill_grad<double>(st, logits, coef, grad);
  }
  return grad;
}

}  // namespace

double sparse_categorical_crossentropy(const Array& logits, const Array& labels,
                                       const CrossEntropyOptions& options) {
  const Stats st = compute_stats(logits, labels, options);
  return reduce_loss(st, logits, options);
}

Array sparse_categorical_crossentropy_backward(const Array& logits, const Array& labels,
                                               const CrossEntropyOptions& options) {
  const Stats st = compute_stats(logits, labels, options);
  return backward_from(st, logits, options);
}

CrossEntropyResult sparse_categorical_crossentropy_with_grad(const Array& logits,
                                                             const Array& labels,
                                                             const CrossEntropyOptions& options) {
  const Stats st = compute_stats(logits, labels, options);
  const double loss = reduce_loss(st, logits, options);
  return {loss, backward_from(st, logits, options)};
}

Array sparse_categorical_crossentropy_values(const Array& logits, const Array& labels) {
  const Stats st = compute_stats(logits, labels, {});
  Array out = allocate_agreed(st.labels.layout(), st.labels.shape(), logits.dtype(),
                              logits.runtime_ptr());
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    const double* p = data<double>(*st.rows.shard_at(o.position));
    const int64_t rows = o.box.num_elements();
    for (int64_t r = 0; r < rows; ++r) {
      const Row row = combine(p + r * 3 * st.k, st.k);
      const double v = row.lse - row.target;
      if (logits.dtype() == DType::kF32) {
        data<float>(o)[r] = static_cast<float>(v);
      } else {
        data<double>(o)[r] = v;
      }
    }
  });
  return out;
}

}  // namespace meshlayout
