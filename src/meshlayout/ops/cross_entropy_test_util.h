// cross_entropy_test_util.h — the sparse categorical cross-entropy checks shared by the
// in-process, threads-as-processes and mpirun tests (test-only): a float64 log-softmax
// reference, the table of layouts on mesh[data=2,model=4] (vocab over 'model', rows over 'data',
// both, replicated, uneven and empty vocab blocks), central finite differences, the per-device
// memory bound and the bad inputs. Failures throw InternalError naming the case.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/ops/cross_entropy.h"

namespace meshlayout::testing {

inline double ce_element(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? static_cast<double>(t.data_as<float>()[i])
                                  : t.data_as<double>()[i];
}

inline void ce_set(HostTensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kF32) {
    t.data_as<float>()[i] = static_cast<float>(v);
  } else {
    t.data_as<double>()[i] = v;
  }
}

struct CrossEntropyReference {
  std::vector<double> values;  // per position
  double loss = 0;             // mean over positions (0 when none)
  std::vector<double> grad;    // d loss / d logits
};

/// log_softmax in float64 on the host: loss = mean(−log_softmax(x)[label]).
inline CrossEntropyReference reference_cross_entropy(const HostTensor& logits,
                                                     const HostTensor& labels) {
  CrossEntropyReference r;
  const int64_t V = logits.shape().back();
  const int64_t n = labels.num_elements();
  r.grad.assign(static_cast<size_t>(logits.num_elements()), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, ce_element(logits, i * V + j));
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(ce_element(logits, i * V + j) - m);
    const int64_t label = labels.data_as<int32_t>()[i];
    const double lse = m + std::log(s);
    r.values.push_back(lse - ce_element(logits, i * V + label));
    r.loss += r.values.back();
    for (int64_t j = 0; j < V; ++j) {
      r.grad[static_cast<size_t>(i * V + j)] =
          (std::exp(ce_element(logits, i * V + j) - lse) - (j == label ? 1.0 : 0.0)) /
          static_cast<double>(n);
    }
  }
  if (n > 0) r.loss /= static_cast<double>(n);
  return r;
}

/// Logits uniform in [-scale, scale) and labels uniform in [0, V), deterministic in `seed`.
inline HostTensor ce_logits(DType dtype, const Shape& shape, uint64_t seed, double scale = 6.0) {
  HostTensor t = HostTensor::random(dtype, shape, seed);
  for (int64_t i = 0; i < t.num_elements(); ++i) ce_set(t, i, ce_element(t, i) * scale);
  return t;
}

inline HostTensor ce_labels(const Shape& logits_shape, uint64_t seed) {
  HostTensor t(DType::kI32, Shape(logits_shape.begin(), logits_shape.end() - 1));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    t.data_as<int32_t>()[i] = static_cast<int32_t>((x * 0x2545F4914F6CDD1Dull >> 33) %
                                                   static_cast<uint64_t>(logits_shape.back()));
  }
  return t;
}

inline Array ce_distribute(const std::shared_ptr<Runtime>& rt, const HostTensor& t,
                           const std::string& layout, const DeviceMesh& mesh) {
  return distribute_tensor(t, TensorLayout::from_string(layout).with_device_mesh(mesh),
                           {.runtime = rt});
}

struct CrossEntropyCase {
  Shape shape;
  std::string logits_layout, labels_layout;
};

/// The layouts of the table, on mesh[data=2,model=4].
inline std::vector<CrossEntropyCase> cross_entropy_cases() {
  return {
      {{4, 6, 10}, "None,None,model", "None,None"},         // vocab-parallel, 10 over 4 (3,3,3,1)
      {{4, 6, 10}, "data,None,model", "data,None"},         // rows over data, vocab over model
      {{4, 6, 10}, "data,None,None", "None,model"},         // rows over data; labels elsewhere
      {{4, 6, 10}, "None,None,None", "data,None"},          // replicated
      {{4, 6, 10}, "None,None,(data,model)", "None,None"},  // 10 over 8: blocks of 2, 3 empty
      {{4, 6, 10}, "(data,model),None,None", "None,None"},  // 4 rows over 8, some empty
      {{4, 6, 10}, "model,data,None", "None,None"},
      {{4, 6, 10}, "None,model,data", "None,data"},
      {{12, 32}, "data,model", "data"},  // 2-D, even
      {{2, 3, 5, 7}, "data,None,None,model", "None,None,model"},
      {{3, 1}, "None,model", "None"},   // V = 1: loss 0
      {{0, 10}, "data,model", "data"},  // no positions: loss 0
  };
}

inline void ce_expect_near(double got, double want, double tol, const std::string& what) {
  if (!(std::fabs(got - want) <= tol)) {
    throw InternalError(
        fmt::format("{}: got {:.17g}, expected {:.17g} (tolerance {:.3g})", what, got, want, tol));
  }
}

/// Loss (all three entry points), per-position values and gradient against the reference.
inline void check_cross_entropy_case(const std::shared_ptr<Runtime>& rt, const CrossEntropyCase& c,
                                     DType dtype, uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const std::string where = fmt::format("{} {} logits [{}] labels [{}]", dtype_name(dtype),
                                        shape_to_string(c.shape), c.logits_layout, c.labels_layout);
  const HostTensor hx = ce_logits(dtype, c.shape, seed), hy = ce_labels(c.shape, seed + 7);
  const CrossEntropyReference ref = reference_cross_entropy(hx, hy);
  const Array x = ce_distribute(rt, hx, c.logits_layout, mesh);
  const Array y = ce_distribute(rt, hy, c.labels_layout, mesh);

  const double tol = 1e-6 * std::max(1.0, std::fabs(ref.loss));
  ce_expect_near(sparse_categorical_crossentropy(x, y), ref.loss, tol, "loss " + where);
  const CrossEntropyResult both = sparse_categorical_crossentropy_with_grad(x, y);
  ce_expect_near(both.loss, ref.loss, tol, "fused loss " + where);
  const Array g = sparse_categorical_crossentropy_backward(x, y);
  const double n = std::max<double>(1.0, static_cast<double>(hy.num_elements()));
  const double gtol = dtype == DType::kF32 ? 1e-6 / n : 1e-13 / n;
  for (const Array* grad : {&both.dlogits, &g}) {
    if (grad->layout() != x.layout() || grad->dtype() != dtype) {
      throw InternalError(fmt::format("{}: dlogits is {} {}, not in the logits' layout {}", where,
                                      grad->layout().to_string(), dtype_name(grad->dtype()),
                                      x.layout().to_string()));
    }
    const HostTensor hg = grad->gather();
    for (int64_t i = 0; i < hg.num_elements(); ++i) {
      ce_expect_near(ce_element(hg, i), ref.grad[static_cast<size_t>(i)], gtol,
                     fmt::format("dlogits[flat {}] {}", i, where));
    }
  }
  CrossEntropyOptions sum{.reduction = LossReduction::kSum, .grad_scale = 2.5};
  ce_expect_near(sparse_categorical_crossentropy(x, y, sum),
                 ref.loss * static_cast<double>(hy.num_elements()), tol * n, "sum loss " + where);
  const HostTensor hs = sparse_categorical_crossentropy_backward(x, y, sum).gather();
  for (int64_t i = 0; i < hs.num_elements(); ++i) {
    ce_expect_near(ce_element(hs, i), 2.5 * n * ref.grad[static_cast<size_t>(i)], 2.5 * n * gtol,
                   fmt::format("sum dlogits[flat {}] {}", i, where));
  }
  const HostTensor hv = sparse_categorical_crossentropy_values(x, y).gather();
  for (int64_t i = 0; i < hv.num_elements(); ++i) {
    const double want = ref.values[static_cast<size_t>(i)];
    ce_expect_near(ce_element(hv, i), want,
                   (dtype == DType::kF32 ? 1e-6 : 1e-13) * (1 + std::fabs(want)),
                   fmt::format("values[flat {}] {}", i, where));
  }
}

/// Central differences of the loss (h = 1e-6, F64 logits, computed by the sharded op itself
/// and by the float64 reference) against dlogits at a few elements: the target of row 0, the
/// last element, and elements in every vocab block.
inline void check_finite_differences(const std::shared_ptr<Runtime>& rt, const std::string& layout,
                                     uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 3, 10};
  HostTensor hx = ce_logits(DType::kF64, shape, seed);
  const HostTensor hy = ce_labels(shape, seed + 3);
  const Array y = ce_distribute(rt, hy, "None,None", mesh);
  const HostTensor g =
      sparse_categorical_crossentropy_backward(ce_distribute(rt, hx, layout, mesh), y).gather();
  const HostTensor x32 = ce_logits(DType::kF32, shape, seed);
  const HostTensor g32 =
      sparse_categorical_crossentropy_backward(ce_distribute(rt, x32, layout, mesh), y).gather();
  std::vector<int64_t> elements{
      hy.data_as<int32_t>()[0], hx.num_elements() - 1, 1, 4, 8, 9, 37, 65};
  const double h = 1e-6;
  for (int64_t e : elements) {
    const double x0 = ce_element(hx, e);
    ce_set(hx, e, x0 + h);
    const double up = sparse_categorical_crossentropy(ce_distribute(rt, hx, layout, mesh), y);
    ce_set(hx, e, x0 - h);
    const double down = sparse_categorical_crossentropy(ce_distribute(rt, hx, layout, mesh), y);
    ce_set(hx, e, x0);
    ce_expect_near(ce_element(g, e), (up - down) / (2 * h), 1e-8,
                   fmt::format("F64 dlogits[flat {}] vs central difference, [{}]", e, layout));
    // The F32 gradient against central differences of the float64 reference.
    HostTensor xr(DType::kF64, shape);
    for (int64_t i = 0; i < xr.num_elements(); ++i) ce_set(xr, i, ce_element(x32, i));
    ce_set(xr, e, ce_element(x32, e) + h);
    const double rup = reference_cross_entropy(xr, hy).loss;
    ce_set(xr, e, ce_element(x32, e) - h);
    const double rdown = reference_cross_entropy(xr, hy).loss;
    ce_expect_near(
        ce_element(g32, e), (rup - rdown) / (2 * h), 1e-7,
        fmt::format("F32 dlogits[flat {}] vs reference central difference, [{}]", e, layout));
  }
}

/// With the vocab split, no device ever holds a whole logits tensor: each device's peak during
/// the fused call is its dlogits box plus the small statistics (checked exactly), far below the
/// logits' size.
inline void check_memory_bound(const std::shared_ptr<Runtime>& rt, const std::string& layout) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{8, 16, 256};
  const HostTensor hx = ce_logits(DType::kF32, shape, 5), hy = ce_labels(shape, 6);
  const Array x = ce_distribute(rt, hx, layout, mesh);
  const Array y = ce_distribute(rt, hy, "None,None", mesh);
  const int64_t whole = static_cast<int64_t>(hx.num_bytes());
  std::vector<int64_t> live;
  for (VirtualDevice* d : rt->local_devices()) {
    live.push_back(d->memory().stats().bytes_live);
    d->memory().reset_peak();
  }
  CrossEntropyResult r = sparse_categorical_crossentropy_with_grad(x, y);
  const ShardGeometry& gx = x.geometry();
  const int64_t k = gx.num_blocks(2);
  for (size_t i = 0; i < live.size(); ++i) {
    VirtualDevice* d = rt->local_devices()[i];
    const int64_t pos = *mesh.position_of_device(d->id());
    const Box box = gx.box(pos);
    const int64_t rows = box.shape[0] * box.shape[1];
    const int64_t bound = box.num_elements() * 4 + rows * 4 + rows * 4 * 8 + rows * k * 4 * 8;
    const int64_t used = d->memory().stats().peak_bytes - live[i];
    if (used > bound || d->memory().stats().peak_bytes >= whole) {
      throw InternalError(
          fmt::format("[{}] {} used {} bytes (peak {}), above its dlogits box + "
                      "statistics {} or the whole logits {}",
                      layout, d->name(), used, d->memory().stats().peak_bytes, bound, whole));
    }
  }
}

/// `f` throws a ValueError whose message contains `expected` (on every process).
inline void expect_value_error(const std::function<void()>& f, const std::string& expected) {
  try {
    f();
  } catch (const ValueError& e) {
    if (std::string(e.what()).find(expected) == std::string::npos) {
      throw InternalError(fmt::format("error \"{}\" does not contain \"{}\"", e.what(), expected));
    }
    return;
  }
  throw InternalError(fmt::format("expected a ValueError containing \"{}\"", expected));
}

/// Bad labels and logits, each in a layout where one device (one process) finds it.
inline void check_bad_inputs(const std::shared_ptr<Runtime>& rt) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 6, 10};
  const std::string lx = "data,None,model";
  HostTensor hx = ce_logits(DType::kF32, shape, 11), hy = ce_labels(shape, 12);
  const Array x = ce_distribute(rt, hx, lx, mesh);
  auto with_label = [&](int64_t at, int32_t v) {
    HostTensor bad = hy;
    bad.data_as<int32_t>()[at] = v;
    return ce_distribute(rt, bad, "data,None", mesh);
  };
  expect_value_error(
      [&] { sparse_categorical_crossentropy(x, with_label(3 * 6 + 5, 10)); },
      "sparse_categorical_crossentropy: label 10 at labels[3, 5] is outside [0, 10): "
      "V = 10 is the last dimension of logits (4, 6, 10)");
  expect_value_error([&] { sparse_categorical_crossentropy_backward(x, with_label(8, -1)); },
                     "label -1 at labels[1, 2] is outside [0, 10)");
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    HostTensor nx = hx;
    ce_set(nx, (3 * 6 + 1) * 10 + 9, bad);  // the last vocab block, on the last data row
    expect_value_error(
        [&] {
          sparse_categorical_crossentropy_with_grad(ce_distribute(rt, nx, lx, mesh),
                                                    with_label(0, 0));
        },
        fmt::format("logits[3, 1, 9] is {}; the logits must be finite", bad));
  }
  const Array y = ce_distribute(rt, hy, "None,None", mesh);
  expect_value_error(
      [&] {
        sparse_categorical_crossentropy(
            x, ce_distribute(rt, HostTensor(DType::kI32, {4, 5}), "None,None", mesh));
      },
      "labels of shape (4, 5) must have the shape of logits (4, 6, 10) without its last (class) "
      "dimension, (4, 6)");
  expect_value_error(
      [&] {
        sparse_categorical_crossentropy(
            x, ce_distribute(rt, HostTensor(DType::kF32, {4, 6}), "None,None", mesh));
      },
      "labels must be integer class indices (I32 or I64), got F32");
  expect_value_error(
      [&] {
        sparse_categorical_crossentropy(
            ce_distribute(rt, HostTensor::random(DType::kBF16, shape, 1), lx, mesh), y);
      },
      "logits must be F32 or F64, got BF16");
  // Still usable after the errors: no process was left waiting.
  ce_expect_near(sparse_categorical_crossentropy(x, y), reference_cross_entropy(hx, hy).loss, 1e-6,
                 "loss after errors");
}

inline void run_all_cross_entropy_cases(const std::shared_ptr<Runtime>& rt, uint64_t seed) {
  uint64_t s = seed;
  for (const CrossEntropyCase& c : cross_entropy_cases()) {
    check_cross_entropy_case(rt, c, DType::kF32, s++);
    check_cross_entropy_case(rt, c, DType::kF64, s++);
  }
  for (const char* layout :
       {"None,None,model", "data,None,model", "model,None,data", "None,None,None"}) {
    check_finite_differences(rt, layout, s++);
  }
  for (const char* layout : {"None,None,model", "data,None,model", "None,None,(data,model)"}) {
    check_memory_bound(rt, layout);
  }
  check_bad_inputs(rt);
}

}  // namespace meshlayout::testing
