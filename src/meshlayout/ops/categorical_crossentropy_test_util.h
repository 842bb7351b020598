// categorical_crossentropy_test_util.h — the checks of categorical_crossentropy (from logits and
// from probabilities, with label smoothing) and of sparse_categorical_crossentropy from
// probabilities (cross_entropy.h), shared by the in-process, threads-as-processes and mpirun
// tests (test-only): float64 formulas on the host, a table of layouts on mesh[data=2,model=4]
// (replicated, classes over 'model' 10 over 4 = 3,3,3,1, rows over 'data', both, 10 over 8 with
// empty blocks), probabilities that are not normalised and rows with entries clipped below ε and
// above 1 − ε, central finite differences through the sharded op, and the bad inputs. Failures
// throw InternalError naming the case. The per-position losses (reduction "none") against the
// same table: categorical_crossentropy_values_test_util.h.
//
// Example:
//   testing::run_all_cce_cases(Runtime::single_process(8), /*seed=*/1);   // throws on a failure
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/ops/cross_entropy_test_util.h"

namespace meshlayout::testing {

enum class CceMode { kLogits, kProbabilities, kSparseProbabilities };

inline const char* cce_mode_name(CceMode m) {
  return m == CceMode::kLogits          ? "categorical from logits"
         : m == CceMode::kProbabilities ? "categorical from probabilities"
                                        : "sparse from probabilities";
}

/// The float64 formulas of Keras: from logits −Σ t·log_softmax(x); from probabilities
/// q = p / Σp, c = clip(q, 1e-7, 1 − 1e-7), −Σ t·log c; the mean over rows. The gradient: from
/// logits (softmax·Σt − t)/N; from probabilities ((in band ? −t_k/q_k : 0) + Σ_{in band} t)/S/N.
/// `t` (rows × V, F64) are the targets, already one-hot for the sparse loss; label smoothing is
/// applied here.
inline CrossEntropyReference reference_categorical(const HostTensor& pred,
                                                   const std::vector<double>& t_in,
                                                   bool from_logits, double smoothing) {
  CrossEntropyReference r;
  const int64_t V = pred.shape().back();
  const int64_t n = V == 0 ? 0 : pred.num_elements() / V;
  const double eps = 1e-7;
  r.grad.assign(static_cast<size_t>(pred.num_elements()), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> x(static_cast<size_t>(V)), t(static_cast<size_t>(V));
    for (int64_t j = 0; j < V; ++j) {
      x[j] = ce_element(pred, i * V + j);
      t[j] = t_in[static_cast<size_t>(i * V + j)] * (1 - smoothing) +
             smoothing / static_cast<double>(V);
    }
    double loss = 0;
    double* g = r.grad.data() + i * V;
    if (from_logits) {
      const double m = *std::max_element(x.begin(), x.end());
      double s = 0, ts = 0;
      for (int64_t j = 0; j < V; ++j) s += std::exp(x[j] - m), ts += t[j];
      const double lse = m + std::log(s);
      for (int64_t j = 0; j < V; ++j) {
        loss -= t[j] * (x[j] - lse);
        g[j] = (std::exp(x[j] - lse) * ts - t[j]) / static_cast<double>(n);
      }
    } else {
      double s = 0, band = 0;
      for (int64_t j = 0; j < V; ++j) s += x[j];
      for (int64_t j = 0; j < V; ++j) {
        const double q = x[j] / s;
        loss -= t[j] * std::log(std::clamp(q, eps, 1 - eps));
        if (q >= eps && q <= 1 - eps) band += t[j];
      }
      for (int64_t j = 0; j < V; ++j) {
        const double q = x[j] / s;
        const double gq = q >= eps && q <= 1 - eps ? -t[j] / q : 0.0;
        g[j] = (gq + band) / s / static_cast<double>(n);
      }
    }
    r.values.push_back(loss);
    r.loss += loss;
  }
  if (n > 0) r.loss /= static_cast<double>(n);
  return r;
}

/// Probabilities (…, V): each row a softmax of random logits times a factor in [1, 2) (not
/// normalised: the op must divide by the sum), with entries clipped below ε (rows 1 and 5:
/// 1e-9) and a row clipped above 1 − ε (row 2: p[0] = 1, the others 1e-11).
inline HostTensor cce_probabilities(DType dtype, const Shape& shape, uint64_t seed) {
  HostTensor t = ce_logits(dtype, shape, seed, 3.0);
  const int64_t V = shape.back(), n = V == 0 ? 0 : t.num_elements() / V;
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, ce_element(t, i * V + j));
    for (int64_t j = 0; j < V; ++j) s += std::exp(ce_element(t, i * V + j) - m);
    const double scale =
        1.0 + static_cast<double>((i * 37 + static_cast<int64_t>(seed)) % 10) / 10.0;
    for (int64_t j = 0; j < V; ++j)
      ce_set(t, i * V + j, scale * std::exp(ce_element(t, i * V + j) - m) / s);
    if (V >= 10 && i == 1) ce_set(t, i * V + 2, 1e-9), ce_set(t, i * V + 7, 1e-9);
    if (V >= 10 && i == 5) ce_set(t, i * V + 9, 1e-9);
    if (V >= 2 && i == 2) {
      for (int64_t j = 0; j < V; ++j) ce_set(t, i * V + j, j == 0 ? 1.0 : 1e-11);
    }
  }
  return t;
}

/// Targets (…, V) in `dtype`: one-hot rows (even rows) and probability rows (odd rows); rows
/// 4i + 3 sum to 2, not 1 (Keras takes them as they are: the softmax term is scaled by Σt).
inline HostTensor cce_targets(DType dtype, const Shape& shape, uint64_t seed) {
  const HostTensor labels = ce_labels(shape, seed);
  HostTensor soft = ce_logits(DType::kF64, shape, seed + 1, 1.0);
  HostTensor t(dtype, shape);
  const int64_t V = shape.back(), n = V == 0 ? 0 : t.num_elements() / V;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::fabs(ce_element(soft, i * V + j));
    for (int64_t j = 0; j < V; ++j) {
      const double v = i % 2 == 0
                           ? (j == labels.data_as<int32_t>()[i] ? 1.0 : 0.0)
                           : std::fabs(ce_element(soft, i * V + j)) / s * (i % 4 == 3 ? 2.0 : 1.0);
      ce_set(t, i * V + j, v);
    }
  }
  return t;
}

/// Labels for the sparse loss: random, with row 1's on a class clipped below ε and row 2's on the
/// class clipped above (both rows then have a zero gradient: the clip passes none).
inline HostTensor cce_labels(const Shape& shape, uint64_t seed) {
  HostTensor y = ce_labels(shape, seed);
  if (shape.back() >= 10 && y.num_elements() > 2)
    y.data_as<int32_t>()[1] = 2, y.data_as<int32_t>()[2] = 0;
  return y;
}

inline std::vector<double> one_hot(const HostTensor& labels, int64_t V) {
  std::vector<double> t(static_cast<size_t>(labels.num_elements() * V), 0.0);
  for (int64_t i = 0; i < labels.num_elements(); ++i)
    t[static_cast<size_t>(i * V + labels.data_as<int32_t>()[i])] = 1;
  return t;
}

inline std::vector<double> cce_doubles(const HostTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = ce_element(t, i);
  return v;
}

struct CceCase {
  Shape shape;
  std::string pred_layout, target_layout;  // target_layout: of the (…, V) targets or (…) labels
};

inline std::vector<CceCase> cce_cases() {
  return {
      {{4, 3, 10}, "None,None,None", "None,None,None"},          // replicated
      {{4, 3, 10}, "None,None,model", "data,None,None"},         // vocab-parallel, 10 over 4
      {{4, 3, 10}, "data,None,None", "None,None,model"},         // batch-sharded
      {{4, 3, 10}, "data,None,model", "None,model,None"},        // 2-D
      {{4, 3, 10}, "None,None,(data,model)", "None,None,None"},  // 10 over 8: 3 empty blocks
      {{4, 3, 10}, "model,data,None", "data,None,model"},
      {{12, 10}, "data,model", "model,None"},  // 2-D, rank 2
  };
}

inline std::string sparse_layout(const CceCase& c) {
  // The labels' layout: the targets' without the last dimension.
  const std::string& l = c.target_layout;
  return l.substr(0, l.rfind(','));
}

/// The loss (value, fused, backward) and the gradient (layout, dtype, values) against the
/// float64 formulas: F32 within 1e-5 relative, F64 within 1e-10.
inline void check_cce_case(const std::shared_ptr<Runtime>& rt, const CceCase& c, CceMode mode,
                           DType dtype, DType target_dtype, double smoothing, uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const std::string where =
      fmt::format("{} {} (targets {}, ls {}) {} pred [{}] targets [{}]", cce_mode_name(mode),
                  dtype_name(dtype), dtype_name(target_dtype), smoothing, shape_to_string(c.shape),
                  c.pred_layout, c.target_layout);
  const bool logits = mode == CceMode::kLogits;
  const HostTensor hx =
      logits ? ce_logits(dtype, c.shape, seed) : cce_probabilities(dtype, c.shape, seed);
  const bool sparse = mode == CceMode::kSparseProbabilities;
  const HostTensor ht =
      sparse ? cce_labels(c.shape, seed + 5) : cce_targets(target_dtype, c.shape, seed + 5);
  const CrossEntropyReference ref = reference_categorical(
      hx, sparse ? one_hot(ht, c.shape.back()) : cce_doubles(ht), logits, smoothing);
  const Array x = ce_distribute(rt, hx, c.pred_layout, mesh);
  const Array t = ce_distribute(rt, ht, sparse ? sparse_layout(c) : c.target_layout, mesh);
  const CrossEntropyOptions opts{.from_logits = logits, .label_smoothing = smoothing};
  const auto value = [&](const CrossEntropyOptions& o) {
    return sparse ? sparse_categorical_crossentropy(x, t, o) : categorical_crossentropy(x, t, o);
  };
  const auto with_grad = [&](const CrossEntropyOptions& o) {
    return sparse ? sparse_categorical_crossentropy_with_grad(x, t, o)
                  : categorical_crossentropy_with_grad(x, t, o);
  };
  const auto backward = [&](const CrossEntropyOptions& o) {
    return sparse ? sparse_categorical_crossentropy_backward(x, t, o)
                  : categorical_crossentropy_backward(x, t, o);
  };
  const double rel = dtype == DType::kF32 ? 1e-5 : 1e-10;
  const double tol = rel * std::max(1.0, std::fabs(ref.loss));
  ce_expect_near(value(opts), ref.loss, tol, "loss " + where);
  const CrossEntropyResult both = with_grad(opts);
  ce_expect_near(both.loss, ref.loss, tol, "fused loss " + where);
  const Array g = backward(opts);
  double gmax = 0;
  for (double v : ref.grad) gmax = std::max(gmax, std::fabs(v));
  for (const Array* grad : {&both.dlogits, &g}) {
    if (grad->layout() != x.layout() || grad->dtype() != dtype) {
      throw InternalError(fmt::format("{}: the gradient is {} {}, not in y_pred's layout {}", where,
                                      grad->layout().to_string(), dtype_name(grad->dtype()),
                                      x.layout().to_string()));
    }
    const HostTensor hg = grad->gather();
    for (int64_t i = 0; i < hg.num_elements(); ++i) {
      const double want = ref.grad[static_cast<size_t>(i)];
      ce_expect_near(ce_element(hg, i), want, rel * std::max(std::fabs(want), 1e-3 * gmax),
                     fmt::format("gradient[flat {}] {}", i, where));
    }
  }
  // kSum and grad_scale.
  CrossEntropyOptions sum = opts;
  sum.reduction = LossReduction::kSum;
  sum.grad_scale = 2.5;
  const double n = static_cast<double>(ref.values.size());
  ce_expect_near(value(sum), ref.loss * n, tol * n, "sum loss " + where);
  const HostTensor hs = backward(sum).gather();
  for (int64_t i = 0; i < hs.num_elements(); ++i) {
    const double want = 2.5 * n * ref.grad[static_cast<size_t>(i)];
    ce_expect_near(ce_element(hs, i), want, rel * std::max(std::fabs(want), 2.5 * n * 1e-3 * gmax),
                   fmt::format("sum gradient[flat {}] {}", i, where));
  }
}

/// Central differences of the sharded op's own F64 loss against its F64 gradient, at elements
/// in every class block, in clipped rows and in normal ones, within 1e-6 relative. h = 1e-6 for
/// logits; for probabilities 1e-6·p (4e-8 for entries below 1e-6, which stay below the band).
inline void check_cce_finite_differences(const std::shared_ptr<Runtime>& rt, CceMode mode,
                                         const std::string& layout, double smoothing,
                                         uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 3, 10};
  const bool logits = mode == CceMode::kLogits, sparse = mode == CceMode::kSparseProbabilities;
  HostTensor hx =
      logits ? ce_logits(DType::kF64, shape, seed) : cce_probabilities(DType::kF64, shape, seed);
  const HostTensor ht =
      sparse ? cce_labels(shape, seed + 1) : cce_targets(DType::kF64, shape, seed + 1);
  const Array t = ce_distribute(rt, ht, sparse ? "data,None" : "None,None,model", mesh);
  const CrossEntropyOptions opts{.from_logits = logits, .label_smoothing = smoothing};
  const auto loss = [&](const HostTensor& h) {
    const Array x = ce_distribute(rt, h, layout, mesh);
    return sparse ? sparse_categorical_crossentropy(x, t, opts)
                  : categorical_crossentropy(x, t, opts);
  };
  const Array x = ce_distribute(rt, hx, layout, mesh);
  const HostTensor g = (sparse ? sparse_categorical_crossentropy_backward(x, t, opts)
                               : categorical_crossentropy_backward(x, t, opts))
                           .gather();
  // Row 0 (every block), row 1 (the 1e-9 entry 2 and a normal one), row 2 (clipped above), the
  // last row, row 5's 1e-9 entry 9.
  const std::vector<int64_t> elements{0, 3, 6, 9, 12, 15, 20, 21, 25, 59, 110, 119};
  for (int64_t e : elements) {
    const double x0 = ce_element(hx, e);
    const double h = logits ? 1e-6 : std::fabs(x0) < 1e-6 ? 4e-8 : 1e-6 * std::fabs(x0);
    ce_set(hx, e, x0 + h);
    const double up = loss(hx);
    ce_set(hx, e, x0 - h);
    const double down = loss(hx);
    ce_set(hx, e, x0);
    ce_expect_near(ce_element(g, e), (up - down) / (2 * h),
                   1e-6 * std::max(1.0, std::fabs(ce_element(g, e))),
                   fmt::format("{} (ls {}) gradient[flat {}] vs central difference, [{}]",
                               cce_mode_name(mode), smoothing, e, layout));
  }
}

/// Bad inputs of the categorical loss and of the sparse loss from probabilities.
inline void check_cce_bad_inputs(const std::shared_ptr<Runtime>& rt) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 3, 10};
  const std::string lx = "data,None,model";
  const HostTensor hx = cce_probabilities(DType::kF32, shape, 3),
                   ht = cce_targets(DType::kF32, shape, 4);
  const Array x = ce_distribute(rt, hx, lx, mesh);
  const Array t = ce_distribute(rt, ht, "None,None,None", mesh);
  const CrossEntropyOptions probs{.from_logits = false};
  expect_value_error(
      [&] {
        categorical_crossentropy(
            x, ce_distribute(rt, HostTensor(DType::kF32, {4, 3, 9}), "None,None,None", mesh),
            probs);
      },
      "categorical_crossentropy: targets of shape (4, 3, 9) must have the shape of probabilities "
      "(4, 3, 10)");
  expect_value_error(
      [&] {
        categorical_crossentropy_with_grad(
            x, ce_distribute(rt, HostTensor(DType::kI32, shape), "None,None,None", mesh));
      },
      "categorical_crossentropy: targets must be F32 or F64 (one-hot or probability rows), got I32 "
      "targets of "
      "shape (4, 3, 10)");
  expect_value_error(
      [&] { categorical_crossentropy(x, t, {.from_logits = false, .label_smoothing = 1.5}); },
      "categorical_crossentropy: label_smoothing must be in [0, 1], got 1.5");
  HostTensor bad = hx;
  ce_set(bad, (3 * 3 + 2) * 10 + 8, NAN);  // the last class block of the last row
  expect_value_error(
      [&] { categorical_crossentropy_backward(ce_distribute(rt, bad, lx, mesh), t, probs); },
      "categorical_crossentropy: probabilities[3, 2, 8] is nan; the probabilities must be finite");
  // Sparse from probabilities.
  HostTensor hy = cce_labels(shape, 5);
  hy.data_as<int32_t>()[3 * 3 + 1] = 10;
  expect_value_error(
      [&] { sparse_categorical_crossentropy(x, ce_distribute(rt, hy, "data,None", mesh), probs); },
      "sparse_categorical_crossentropy: label 10 at labels[3, 1] is outside [0, 10): V = 10 is the "
      "last dimension "
      "of probabilities (4, 3, 10)");
  const Array y = ce_distribute(rt, cce_labels(shape, 5), "None,None", mesh);
  expect_value_error(
      [&] {
        sparse_categorical_crossentropy(x, y, {.from_logits = false, .label_smoothing = 0.1});
      },
      "sparse_categorical_crossentropy: label_smoothing must be 0 (Keras' "
      "SparseCategoricalCrossentropy has none), "
      "got 0.1");
  // Still usable after the errors: no process was left waiting.
  ce_expect_near(categorical_crossentropy(x, t, probs),
                 reference_categorical(hx, cce_doubles(ht), false, 0).loss, 1e-5,
                 "loss after errors");
}

inline void run_all_cce_cases(const std::shared_ptr<Runtime>& rt, uint64_t seed) {
  uint64_t s = seed;
  for (const CceCase& c : cce_cases()) {
    for (CceMode mode :
         {CceMode::kLogits, CceMode::kProbabilities, CceMode::kSparseProbabilities}) {
      check_cce_case(rt, c, mode, DType::kF32, DType::kF32, 0.0, s++);
      check_cce_case(rt, c, mode, DType::kF64, DType::kF64, 0.0, s++);
    }
    check_cce_case(rt, c, CceMode::kLogits, DType::kF32, DType::kF64, 0.1, s++);
    check_cce_case(rt, c, CceMode::kProbabilities, DType::kF64, DType::kF32, 0.2, s++);
  }
  for (const char* layout : {"None,None,None", "None,None,model", "data,None,None",
                             "data,None,model", "None,None,(data,model)"}) {
    check_cce_finite_differences(rt, CceMode::kLogits, layout, 0.0, s++);
    check_cce_finite_differences(rt, CceMode::kProbabilities, layout, 0.0, s++);
    check_cce_finite_differences(rt, CceMode::kSparseProbabilities, layout, 0.0, s++);
  }
  check_cce_finite_differences(rt, CceMode::kProbabilities, "data,None,model", 0.1, s++);
  check_cce_finite_differences(rt, CceMode::kLogits, "None,None,model", 0.1, s++);
  check_cce_bad_inputs(rt);
}

}  // namespace meshlayout::testing
