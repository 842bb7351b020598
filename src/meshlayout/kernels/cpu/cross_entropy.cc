// cpu/cross_entropy.cc — the CPU implementation of kernels/cross_entropy.h (moved unchanged from
// ops/cross_entropy_stats.cc and ops/cross_entropy.cc).
#include "meshlayout/kernels/cross_entropy.h"
#include "meshlayout/kernels/cpu/float_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshlayout {

using cpu_kernels::dispatch_float;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEpsilon = 1e-7;  // keras.config.epsilon()

// A shard's buffer as T.
template <typename T>
const T* data(const Array::Shard& s) {
  return reinterpret_cast<const T*>(s.buffer.data());
}
template <typename T>
T* data(Array::Shard& s) {
  return reinterpret_cast<T*>(s.buffer.data());
}

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

void keep_first(std::optional<CrossEntropyFailure>& slot, CrossEntropyFailure f) {
  if (!slot || f.before(*slot)) slot = std::move(f);
}

// What target() reads besides the targets' shard.
struct Targets {
  const CrossEntropySpec& spec;
  DType dtype;
  int64_t classes;
};

// The target of class j (global index) of local element i of the targets' box.
double target(const Targets& st, const Array::Shard& ts, int64_t row, int64_t label_or_i,
              int64_t j) {
  if (st.spec.sparse) return label_at(ts, st.dtype, row) == j ? 1.0 : 0.0;
  const double t = float_at(ts, st.dtype, label_or_i);
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

Row combine(const CrossEntropySpec& sp, const double* st, int64_t k) {
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

// The loss of one row from its combined statistics.
double row_loss(const CrossEntropySpec& spec, int64_t k, const double* s1, const double* s2) {
  if (spec.two_rounds()) {
    double l = 0;
    for (int64_t b = 0; b < k; ++b) l += s2[2 * b];
    return l;
  }
  const Row r = combine(spec, s1, k);
  if (spec.from_logits) return r.lse * r.t - r.u;
  return -std::log(clip(r.t / r.sum));
}

template <typename T>
void local_stats(const CrossEntropyStats& a) {
  const CrossEntropySpec& sp = a.spec;
  const Shape& pshape = *a.pred_shape;
  const int64_t V = pshape.back();
  const size_t lead = pshape.size() - 1;
  const Shape lshape(pshape.begin(), pshape.end() - 1);
  const int64_t w = sp.width();
  const Targets st{sp, a.target_dtype, V};
  const Array::Shard& xs = *a.pred;
  const Array::Shard& ts = *a.targets;
  Array::Shard& ss = *a.stats;
  std::optional<CrossEntropyFailure>& failure = *a.failure;
  const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
  const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
  const T* x = data<T>(xs);
  double* o = data<double>(ss);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * nv;
    int64_t label = -1;
    if (sp.sparse) {
      label = label_at(ts, a.target_dtype, r);
      if (label < 0 || label >= V) {
        const Shape at = row_coords(xs.box, lead, r);
        keep_first(failure, {.kind = 0, .flat = ravel(at, lshape), .at = at, .label = label});
      }
    }
    double m = -kInf;
    bool finite = true;
    for (int64_t j = 0; j < nv; ++j) {
      const double v = static_cast<double>(row[j]);
      if (!std::isfinite(v)) {
        Shape at = row_coords(xs.box, lead, r);
        at.push_back(v0 + j);
        keep_first(failure, {.kind = 1, .flat = ravel(at, pshape), .at = at, .value = v});
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
}

template <typename T>
void local_stats2(const CrossEntropyStats2& a) {
  const Targets st{a.spec, a.target_dtype, a.classes};
  const Array::Shard& xs = *a.pred;
  const Array::Shard& ts = *a.targets;
  const size_t lead = xs.box.shape.size() - 1;
  const double* s1 = data<double>(*a.stats1);
  double* o = data<double>(*a.out);
  const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
  const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
  const T* x = data<T>(xs);
  for (int64_t r = 0; r < rows; ++r) {
    const double sum = combine(a.spec, s1 + r * 2 * a.k, a.k).sum;
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
}

template <typename T>
void fill_grad(const CrossEntropyGrad& a) {
  const CrossEntropySpec& sp = a.spec;
  const Targets st{sp, a.target_dtype, a.classes};
  const int64_t w1 = sp.width();
  const double coef = a.coef;
  Array::Shard& gs = *a.grad;
  const Array::Shard& xs = *a.pred;
  const Array::Shard& ts = *a.targets;
  const size_t lead = xs.box.shape.size() - 1;
  const double* s1 = data<double>(*a.stats1);
  const double* s2 = sp.two_rounds() ? data<double>(*a.stats2) : nullptr;
  const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
  if (nv == 0) return;
  const int64_t rows = xs.box.num_elements() / nv;
  const T* x = data<T>(xs);
  T* g = data<T>(gs);
  for (int64_t r = 0; r < rows; ++r) {
    const Row row = combine(sp, s1 + r * w1 * a.k, a.k);
    const T* xr = x + r * nv;
    T* gr = g + r * nv;
    if (sp.from_logits) {
      for (int64_t j = 0; j < nv; ++j) {
        const double p = std::exp(static_cast<double>(xr[j]) - row.lse) * row.t;
        gr[j] = static_cast<T>((p - target(st, ts, r, r * nv + j, v0 + j)) * coef);
      }
    } else if (sp.sparse) {
      // g = (in band) (1 − [j = label]/q)/S, q = p[label]/S: 0 for the row outside the band.
      const int64_t label = label_at(ts, a.target_dtype, r);
      const double q = row.t / row.sum;
      const bool band = in_band(q);
      for (int64_t j = 0; j < nv; ++j) {
        const double d = band ? (1.0 - (v0 + j == label ? 1.0 / q : 0.0)) / row.sum : 0.0;
        gr[j] = static_cast<T>(d * coef);
      }
    } else {
      double b = 0;
      for (int64_t blk = 0; blk < a.k; ++blk) b += s2[r * 2 * a.k + 2 * blk + 1];
      for (int64_t j = 0; j < nv; ++j) {
        const double q = static_cast<double>(xr[j]) / row.sum;
        const double gj = in_band(q) ? -target(st, ts, r, r * nv + j, v0 + j) / q : 0.0;
        gr[j] = static_cast<T>((gj + b) / row.sum * coef);
      }
    }
  }
}

}  // namespace

void cross_entropy_stats_cpu(const CrossEntropyStats& args) {
  dispatch_float(args.pred_dtype, [&]<typename E>(E* /*tag*/) { local_stats<E>(args); });
}

void cross_entropy_stats2_cpu(const CrossEntropyStats2& args) {
  dispatch_float(args.pred_dtype, [&]<typename E>(E* /*tag*/) { local_stats2<E>(args); });
}

void cross_entropy_loss_sum_cpu(const CrossEntropyLossSum& args) {
  const Array::Shard& s = *args.stats1;
  const int64_t w1 = args.spec.width();
  const int64_t rows = s.box.num_elements() / (w1 * args.k);
  const double* p = data<double>(s);
  const double* p2 = args.spec.two_rounds() ? data<double>(*args.stats2) : nullptr;
  double& local = *args.total;
  for (int64_t r = 0; r < rows; ++r) {
    local += row_loss(args.spec, args.k, p + r * w1 * args.k, p2 ? p2 + r * 2 * args.k : nullptr);
  }
}

void cross_entropy_row_losses_cpu(const CrossEntropyRowLosses& args) {
  Array::Shard& o = *args.out;
  const int64_t w1 = args.spec.width();
  const int64_t k = args.k;
  const double* p = data<double>(*args.stats1);
  const double* p2 = args.spec.two_rounds() ? data<double>(*args.stats2) : nullptr;
  const int64_t rows = o.box.num_elements();
  for (int64_t r = 0; r < rows; ++r) {
    const double v = row_loss(args.spec, k, p + r * w1 * k, p2 ? p2 + r * 2 * k : nullptr);
    if (args.dtype == DType::kF32) {
      data<float>(o)[r] = static_cast<float>(v);
    } else {
      data<double>(o)[r] = v;
    }
  }
}

void cross_entropy_grad_cpu(const CrossEntropyGrad& args) {
  dispatch_float(args.pred_dtype, [&]<typename E>(E* /*tag*/) { fill_grad<E>(args); });
}

}  // namespace meshlayout
