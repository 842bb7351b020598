// categorical_crossentropy_values_test_util.h — the checks of the per-position losses (Keras
// reduction="none": categorical_crossentropy_values and sparse_categorical_crossentropy_values,
// cross_entropy.h) against the float64 formulas of categorical_crossentropy_test_util.h, on its
// table of layouts, shared by the in-process, threads-as-processes and mpirun tests (test-only):
// each value position by position, their mean against the reduced loss, reduction and
// grad_scale ignored, the sparse loss from logits, and the bad inputs. Failures throw
// InternalError naming the case.
//
// Example:
//   testing::run_all_cce_values_cases(Runtime::single_process(8), /*seed=*/1);
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/ops/categorical_crossentropy_test_util.h"

namespace meshlayout::testing {

/// The per-position losses (Keras reduction="none": sparse_categorical_crossentropy_values and
/// categorical_crossentropy_values) against the float64 formulas position by position (F64
/// within 1e-12, F32 within 1e-5, relative), in y_pred's dtype and laid out as y_pred without the
/// class dimension; their mean equals the op's reduced loss (F64 within 1e-12 relative, F32 within
/// 1e-6); reduction and grad_scale do not change them.
inline void check_cce_values_case(const std::shared_ptr<Runtime>& rt, const CceCase& c,
                                  CceMode mode, DType dtype, DType target_dtype, double smoothing,
                                  uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const std::string where =
      fmt::format("values, {} {} (targets {}, ls {}) {} pred [{}] targets [{}]",
                  cce_mode_name(mode), dtype_name(dtype), dtype_name(target_dtype), smoothing,
                  shape_to_string(c.shape), c.pred_layout, c.target_layout);
  const bool logits = mode == CceMode::kLogits;
  const bool sparse = mode == CceMode::kSparseProbabilities;
  const HostTensor hx =
      logits ? ce_logits(dtype, c.shape, seed) : cce_probabilities(dtype, c.shape, seed);
  const HostTensor ht =
      sparse ? cce_labels(c.shape, seed + 5) : cce_targets(target_dtype, c.shape, seed + 5);
  const CrossEntropyReference ref = reference_categorical(
      hx, sparse ? one_hot(ht, c.shape.back()) : cce_doubles(ht), logits, smoothing);
  const Array x = ce_distribute(rt, hx, c.pred_layout, mesh);
  const Array t = ce_distribute(rt, ht, sparse ? sparse_layout(c) : c.target_layout, mesh);
  const CrossEntropyOptions opts{.from_logits = logits, .label_smoothing = smoothing};
  const auto values = [&](const CrossEntropyOptions& o) {
    return sparse ? sparse_categorical_crossentropy_values(x, t, o)
                  : categorical_crossentropy_values(x, t, o);
  };
  const double reduced =
      sparse ? sparse_categorical_crossentropy(x, t, opts) : categorical_crossentropy(x, t, opts);
  const Array v = values(opts);
  const std::vector<DimSharding> lead(x.layout().axes().begin(), x.layout().axes().end() - 1);
  const Shape lead_shape(c.shape.begin(), c.shape.end() - 1);
  if (v.layout() != TensorLayout(lead, mesh) || v.dtype() != dtype || v.shape() != lead_shape) {
    throw InternalError(fmt::format(
        "{}: the values are {} {} {}, not {} {} {}", where, v.layout().to_string(),
        dtype_name(v.dtype()), shape_to_string(v.shape()), TensorLayout(lead, mesh).to_string(),
        dtype_name(dtype), shape_to_string(lead_shape)));
  }
  const HostTensor hv = v.gather();
  if (static_cast<size_t>(hv.num_elements()) != ref.values.size()) {
    throw InternalError(
        fmt::format("{}: {} values, expected {}", where, hv.num_elements(), ref.values.size()));
  }
  const double rel = dtype == DType::kF32 ? 1e-5 : 1e-12;
  double sum = 0;
  for (int64_t i = 0; i < hv.num_elements(); ++i) {
    const double want = ref.values[static_cast<size_t>(i)];
    ce_expect_near(ce_element(hv, i), want, rel * std::max(1.0, std::fabs(want)),
                   fmt::format("value[flat {}] {}", i, where));
    sum += ce_element(hv, i);
  }
  const double mean = hv.num_elements() == 0 ? 0.0 : sum / static_cast<double>(hv.num_elements());
  ce_expect_near(mean, reduced,
                 (dtype == DType::kF32 ? 1e-6 : 1e-12) * std::max(1.0, std::fabs(reduced)),
                 "mean of the values vs the reduced loss, " + where);
  // Neither reduction nor grad_scale applies (nor is checked: a non-finite scale is ignored).
  CrossEntropyOptions other = opts;
  other.reduction = LossReduction::kSum;
  other.grad_scale = INFINITY;
  const HostTensor hw = values(other).gather();
  for (int64_t i = 0; i < hw.num_elements(); ++i) {
    if (ce_element(hw, i) != ce_element(hv, i)) {
      throw InternalError(fmt::format(
          "{}: value[flat {}] changes with reduction kSum and grad_scale inf", where, i));
    }
  }
}

/// The values refuse what the reduced losses refuse: label smoothing for the sparse loss, bad
/// shapes, bad labels and non-finite predictions.
inline void check_cce_values_bad_inputs(const std::shared_ptr<Runtime>& rt) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 3, 10};
  const HostTensor hx = cce_probabilities(DType::kF32, shape, 3);
  const Array x = ce_distribute(rt, hx, "data,None,model", mesh);
  const Array y = ce_distribute(rt, cce_labels(shape, 5), "None,None", mesh);
  for (const bool from_logits : {true, false}) {
    expect_value_error(
        [&] {
          sparse_categorical_crossentropy_values(
              x, y, {.from_logits = from_logits, .label_smoothing = 0.1});
        },
        "sparse_categorical_crossentropy: label_smoothing must be 0 (Keras' "
        "SparseCategoricalCrossentropy has none), "
        "got 0.1");
  }
  expect_value_error(
      [&] {
        categorical_crossentropy_values(
            x, ce_distribute(rt, HostTensor(DType::kF32, {4, 3, 9}), "None,None,None", mesh),
            {.from_logits = false});
      },
      "categorical_crossentropy: targets of shape (4, 3, 9) must have the shape of probabilities "
      "(4, 3, 10)");
  const Array t = ce_distribute(rt, cce_targets(DType::kF32, shape, 4), "None,None,None", mesh);
  expect_value_error([&] { categorical_crossentropy_values(x, t, {.label_smoothing = -0.5}); },
                     "categorical_crossentropy: label_smoothing must be in [0, 1], got -0.5");
  HostTensor bad = hx;
  ce_set(bad, (3 * 3 + 2) * 10 + 8, NAN);
  expect_value_error(
      [&] {
        categorical_crossentropy_values(ce_distribute(rt, bad, "data,None,model", mesh), t,
                                        {.from_logits = false});
      },
      "categorical_crossentropy: probabilities[3, 2, 8] is nan; the probabilities must be finite");
  HostTensor hy = cce_labels(shape, 5);
  hy.data_as<int32_t>()[3 * 3 + 1] = 10;
  expect_value_error(
      [&] {
        sparse_categorical_crossentropy_values(x, ce_distribute(rt, hy, "data,None", mesh),
                                               {.from_logits = false});
      },
      "sparse_categorical_crossentropy: label 10 at labels[3, 1] is outside [0, 10)");
  // Still usable after the errors: no process was left waiting.
  const HostTensor hv = categorical_crossentropy_values(x, t, {.from_logits = false}).gather();
  ce_expect_near(
      ce_element(hv, 0),
      reference_categorical(hx, cce_doubles(cce_targets(DType::kF32, shape, 4)), false, 0)
          .values[0],
      1e-5, "value after errors");
}

/// Every case of cce_cases() in every mode and both dtypes, label smoothing (F32 and F64), the
/// sparse loss from logits, then the bad inputs.
inline void run_all_cce_values_cases(const std::shared_ptr<Runtime>& rt, uint64_t seed) {
  uint64_t s = seed;
  for (const CceCase& c : cce_cases()) {
    for (CceMode mode :
         {CceMode::kLogits, CceMode::kProbabilities, CceMode::kSparseProbabilities}) {
      check_cce_values_case(rt, c, mode, DType::kF32, DType::kF32, 0.0, s++);
      check_cce_values_case(rt, c, mode, DType::kF64, DType::kF64, 0.0, s++);
    }
    check_cce_values_case(rt, c, CceMode::kLogits, DType::kF32, DType::kF64, 0.1, s++);
    check_cce_values_case(rt, c, CceMode::kLogits, DType::kF64, DType::kF64, 0.1, s++);
    check_cce_values_case(rt, c, CceMode::kProbabilities, DType::kF64, DType::kF32, 0.2, s++);
    check_cce_values_case(rt, c, CceMode::kProbabilities, DType::kF32, DType::kF32, 0.2, s++);
    // The sparse loss from logits, with and without explicit options.
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const DeviceMesh mesh({2, 4}, {"data", "model"});
      const HostTensor hx = ce_logits(dtype, c.shape, s), hy = ce_labels(c.shape, s + 1);
      ++s;
      const CrossEntropyReference ref =
          reference_categorical(hx, one_hot(hy, c.shape.back()), true, 0.0);
      const Array x = ce_distribute(rt, hx, c.pred_layout, mesh);
      const Array y = ce_distribute(rt, hy, sparse_layout(c), mesh);
      const double reduced = sparse_categorical_crossentropy(x, y);
      const HostTensor a = sparse_categorical_crossentropy_values(x, y).gather();
      const HostTensor b =
          sparse_categorical_crossentropy_values(x, y, {.from_logits = true}).gather();
      const double rel = dtype == DType::kF32 ? 1e-5 : 1e-12;
      double sum = 0;
      for (int64_t i = 0; i < a.num_elements(); ++i) {
        const double want = ref.values[static_cast<size_t>(i)];
        const std::string what = fmt::format("sparse logits value[flat {}] {} [{}]", i,
                                             dtype_name(dtype), c.pred_layout);
        ce_expect_near(ce_element(a, i), want, rel * std::max(1.0, std::fabs(want)), what);
        ce_expect_near(ce_element(b, i), ce_element(a, i), 0.0, what + " (explicit options)");
        sum += ce_element(a, i);
      }
      ce_expect_near(sum / static_cast<double>(a.num_elements()), reduced,
                     (dtype == DType::kF32 ? 1e-6 : 1e-12) * std::max(1.0, std::fabs(reduced)),
                     fmt::format("sparse logits mean of the values {} [{}]", dtype_name(dtype),
                                 c.pred_layout));
    }
  }
  check_cce_values_bad_inputs(rt);
}

}  // namespace meshlayout::testing
