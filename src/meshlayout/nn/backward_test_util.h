// backward_test_util.h — checking a layer's backward against float64 central finite differences
// of a float64 host reference of its forward, written in the test from the formulas. Test-only.
//
// The loss is L = Σ y·w for a fixed random w (so dL/dy = w): the reference forward maps named
// float64 inputs ("x", "kernel", …) to y, and numeric_gradient perturbs one named input element
// by element: (L(θ + h) - L(θ - h)) / 2h.
//
// Example:
//   Params p{{"x", to_f64(x)}, {"kernel", to_f64(kernel)}};
//   auto forward = [&](const Params& q) { return my_reference(q.at("x"), q.at("kernel")); };
//   std::vector<double> want = numeric_gradient(forward, p, "kernel", w);
//   expect_close(gathered_f64(*grads.find(*layer->kernel())), want, "kernel");
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/nn/gradients.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout::testing {

using Params = std::map<std::string, std::vector<double>>;
using Forward = std::function<std::vector<double>(const Params&)>;

inline std::vector<double> to_f64(const HostTensor& t) {
  std::vector<double> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::kF32 ? t.data_as<float>()[i] : t.data_as<double>()[i];
  }
  return out;
}

inline std::vector<double> gathered_f64(const Array& a) { return to_f64(a.gather()); }

inline HostTensor to_f32(const Shape& shape, const std::vector<double>& v) {
  HostTensor t(DType::kF32, shape);
  for (size_t i = 0; i < v.size(); ++i) t.data_as<float>()[i] = static_cast<float>(v[i]);
  return t;
}

/// `v` as an F32 (rounded) or F64 (exact) host tensor.
inline HostTensor to_dtype(const Shape& shape, const std::vector<double>& v, DType dtype) {
  if (dtype == DType::kF32) return to_f32(shape, v);
  HostTensor t(DType::kF64, shape);
  std::copy(v.begin(), v.end(), t.data_as<double>());
  return t;
}

/// Random values in [-1, 1) as float64 (exactly representable in float32).
inline std::vector<double> random_values(const Shape& shape, uint64_t seed, double scale = 1.0) {
  std::vector<double> v = to_f64(HostTensor::random(DType::kF32, shape, seed));
  for (double& e : v) e = static_cast<double>(static_cast<float>(e * scale));
  return v;
}

/// dL/d params[name] by central differences, L = Σ forward(params)·w: two points, or with
/// `five_point` (L(θ−2h) − 8L(θ−h) + 8L(θ+h) − L(θ+2h)) / 12h, accurate to ~1e-12 with h ~ 1e-3
/// (the float64 layers' checks).
inline std::vector<double> numeric_gradient(const Forward& forward, Params params,
                                            const std::string& name, const std::vector<double>& w,
                                            double h = 1e-5, bool five_point = false) {
  std::vector<double>& theta = params.at(name);
  std::vector<double> out(theta.size());
  auto loss = [&] {
    const std::vector<double> y = forward(params);
    EXPECT_EQ(y.size(), w.size());
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * w[i];
    return l;
  };
  for (size_t i = 0; i < theta.size(); ++i) {
    const double keep = theta[i];
    const auto at = [&](double step) {
      theta[i] = keep + step;
      return loss();
    };
    out[i] = five_point ? (at(-2 * h) - 8 * at(-h) + 8 * at(h) - at(2 * h)) / (12 * h)
                        : (at(h) - at(-h)) / (2 * h);
    theta[i] = keep;
  }
  return out;
}

/// max |got - want| / max |want| (the relative error of the whole gradient).
inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / std::max(scale, 1e-12);
}

/// The largest relative error any expect_close saw in this process (printed by the tests).
inline double& max_relative_error_seen() {
  static double seen = 0;
  return seen;
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         const std::string& what, double tolerance = 1e-4) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 1e-6) << what << ": the reference gradient is zero, the check would be empty";
  const double rel = relative_error(got, want);
  max_relative_error_seen() = std::max(max_relative_error_seen(), rel);
  EXPECT_LE(rel, tolerance) << what;
}

/// Each (variable, parameter name) of `weights` has a gradient in `grads`, in its variable's
/// layout, equal (expect_close) to the numeric gradient of forward · w with respect to
/// params[name].
/// `f64`: the gradients must be F64, within 1e-10 of a five-point stencil (h = 1e-3).
inline void expect_weight_gradients(const Gradients& grads,
                                    const std::vector<std::pair<VariablePtr, std::string>>& weights,
                                    const Forward& forward, const Params& params,
                                    const std::vector<double>& w, bool f64 = false) {
  for (const auto& [v, name] : weights) {
    const Array* g = grads.find(*v);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->layout(), v->value().layout()) << name;
    if (f64) {
      EXPECT_EQ(g->dtype(), DType::kF64) << name;
      expect_close(gathered_f64(*g), numeric_gradient(forward, params, name, w, 1e-3, true),
                   "d " + name, 1e-10);
    } else {
      expect_close(gathered_f64(*g), numeric_gradient(forward, params, name, w), "d " + name);
    }
  }
}

}  // namespace meshlayout::testing
