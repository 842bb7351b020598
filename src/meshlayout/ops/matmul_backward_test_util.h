// matmul_backward_test_util.h — the Dense backward checks shared by the in-process,
// threads-as-processes and mpirun tests (test-only): an LM head y = x @ w followed by the
// vocab-parallel cross-entropy, on mesh[data=2,model=4] in several layouts. dx and dw are
// compared with the float64 formulas (dy·wᵀ, xᵀ·dy) and with central differences of the loss
// (F64, through the sharded ops themselves); the conjugate collectives are checked on the plans.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/ops/cross_entropy_test_util.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout::testing {

struct DenseBackwardCase {
  Shape x_shape;  // (B, T, K)
  int64_t n;      // w (K, n)
  std::string x_layout, w_layout;
  std::vector<std::string> dx_axes, dw_axes;  // the partial-sum axes the plans must show
};

inline std::vector<DenseBackwardCase> dense_backward_cases() {
  return {
      {{4, 3, 8}, 10, "data,None,None", "None,model", {"model"}, {"data"}},  // column-parallel head
      {{4, 3, 8}, 12, "data,None,model", "model,None", {}, {"data"}},        // row-parallel
      {{4, 3, 8}, 10, "data,None,None", "None,None", {}, {"data"}},          // data parallel
      {{4, 3, 8}, 10, "None,None,None", "None,None", {}, {}},                // replicated
      {{4, 3, 7}, 9, "data,None,None", "None,model", {"model"}, {"data"}},   // N = 9 over 4
      // 3 rows over 8 cannot be viewed as (15, 7) rows: x is gathered first, no partial sum.
      {{3, 5, 7}, 9, "(data,model),None,None", "None,None", {}, {}},
  };
}

// Host float64 x (M, K) @ w (K, N).
inline std::vector<double> host_matmul(const HostTensor& x, const HostTensor& w) {
  const int64_t k = w.shape()[0], n = w.shape()[1], m = x.num_elements() / k;
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t l = 0; l < k; ++l) {
      for (int64_t j = 0; j < n; ++j)
        y[static_cast<size_t>(i * n + j)] += ce_element(x, i * k + l) * ce_element(w, l * n + j);
    }
  }
  return y;
}

inline void expect_close_tensor(const HostTensor& got, const std::vector<double>& want, double rel,
                                const std::string& what) {
  double scale = 1e-30;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    ce_expect_near(ce_element(got, i), want[static_cast<size_t>(i)], rel * scale,
                   fmt::format("{}[flat {}]", what, i));
  }
}

inline void check_dense_backward_case(const std::shared_ptr<Runtime>& rt,
                                      const DenseBackwardCase& c, DType dtype, uint64_t seed) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const std::string where = fmt::format("{} x {} [{}] w (K, {}) [{}]", dtype_name(dtype),
                                        shape_to_string(c.x_shape), c.x_layout, c.n, c.w_layout);
  const int64_t K = c.x_shape.back(), M = num_elements(c.x_shape) / K;
  HostTensor hx = ce_logits(dtype, c.x_shape, seed, 1.0);
  HostTensor hw = ce_logits(dtype, {K, c.n}, seed + 1, 1.0);
  Shape y_shape = c.x_shape;
  y_shape.back() = c.n;
  const HostTensor hl = ce_labels(y_shape, seed + 2);
  const Array labels = ce_distribute(rt, hl, "None,None", mesh);
  auto loss_of = [&](const HostTensor& x, const HostTensor& w) {
    return sparse_categorical_crossentropy(
        matmul(ce_distribute(rt, x, c.x_layout, mesh), ce_distribute(rt, w, c.w_layout, mesh)),
        labels);
  };

  const Array x = ce_distribute(rt, hx, c.x_layout, mesh),
              w = ce_distribute(rt, hw, c.w_layout, mesh);
  const Array y = matmul(x, w);
  const Array dy = sparse_categorical_crossentropy_backward(y, labels);
  MatmulPlan px, pw;
  const Array dx = matmul_backward_input(dy, w, x.layout(), &px);
  const Array dw = matmul_backward_weight(x, dy, w.layout(), &pw);
  if (dx.layout() != x.layout() || dw.layout() != w.layout() || dx.shape() != x.shape() ||
      dw.shape() != w.shape()) {
    throw InternalError(
        fmt::format("{}: dx {} {} / dw {} {} not in the operands' shapes and layouts", where,
                    shape_to_string(dx.shape()), dx.layout().to_string(),
                    shape_to_string(dw.shape()), dw.layout().to_string()));
  }
  if (px.contracted_axes != c.dx_axes || pw.contracted_axes != c.dw_axes) {
    throw InternalError(
        fmt::format("{}: partial sums over [{}] (dx) and [{}] (dw), expected [{}] and [{}]", where,
                    fmt::join(px.contracted_axes, ","), fmt::join(pw.contracted_axes, ","),
                    fmt::join(c.dx_axes, ","), fmt::join(c.dw_axes, ",")));
  }
  DenseGrads both = matmul_backward(x, w, dy);

  // The float64 formulas, from the float64 reference gradient of the loss.
  HostTensor hy(DType::kF64, y_shape);
  const std::vector<double> yv = host_matmul(hx, hw);
  std::copy(yv.begin(), yv.end(), hy.data_as<double>());
  const std::vector<double> g = reference_cross_entropy(hy, hl).grad;  // (M, N)
  std::vector<double> want_dx(static_cast<size_t>(M * K), 0.0),
      want_dw(static_cast<size_t>(K * c.n), 0.0);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t l = 0; l < K; ++l) {
      for (int64_t j = 0; j < c.n; ++j) {
        const double gij = g[static_cast<size_t>(i * c.n + j)];
        want_dx[static_cast<size_t>(i * K + l)] += gij * ce_element(hw, l * c.n + j);
        want_dw[static_cast<size_t>(l * c.n + j)] += ce_element(hx, i * K + l) * gij;
      }
    }
  }
  const double rel = dtype == DType::kF32 ? 2e-5 : 1e-12;
  expect_close_tensor(dx.gather(), want_dx, rel, "dx " + where);
  expect_close_tensor(dw.gather(), want_dw, rel, "dw " + where);
  expect_close_tensor(both.dx.gather(), want_dx, rel, "fused dx " + where);
  expect_close_tensor(both.dw.gather(), want_dw, rel, "fused dw " + where);

  if (dtype != DType::kF64) return;
  // Central differences of the sharded loss on a few elements of x and w.
  const HostTensor gx = dx.gather(), gw = dw.gather();
  const double h = 1e-6;
  for (int64_t e : {int64_t{0}, M * K / 2 + 1, M * K - 1}) {
    const double v = ce_element(hx, e);
    ce_set(hx, e, v + h);
    const double up = loss_of(hx, hw);
    ce_set(hx, e, v - h);
    const double down = loss_of(hx, hw);
    ce_set(hx, e, v);
    ce_expect_near(ce_element(gx, e), (up - down) / (2 * h), 1e-8,
                   fmt::format("dx[flat {}] vs FD {}", e, where));
  }
  for (int64_t e : {int64_t{0}, K * c.n / 2 + 1, K * c.n - 1}) {
    const double v = ce_element(hw, e);
    ce_set(hw, e, v + h);
    const double up = loss_of(hx, hw);
    ce_set(hw, e, v - h);
    const double down = loss_of(hx, hw);
    ce_set(hw, e, v);
    ce_expect_near(ce_element(gw, e), (up - down) / (2 * h), 1e-8,
                   fmt::format("dw[flat {}] vs FD {}", e, where));
  }
}

inline void run_all_dense_backward_cases(const std::shared_ptr<Runtime>& rt, uint64_t seed) {
  for (const DenseBackwardCase& c : dense_backward_cases()) {
    check_dense_backward_case(rt, c, DType::kF32, seed++);
    check_dense_backward_case(rt, c, DType::kF64, seed++);
  }
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Array m = ce_distribute(rt, ce_logits(DType::kF32, {5, 7}, seed, 1.0), "data,model", mesh);
  const HostTensor t = transpose(m).gather(), hm = m.gather();
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 7; ++j) {
      if (t.data_as<float>()[j * 5 + i] != hm.data_as<float>()[i * 7 + j]) {
        throw InternalError(fmt::format("transpose: element ({}, {}) moved wrong", i, j));
      }
    }
  }
  expect_value_error(
      [&] {
        matmul_backward_weight(
            m, ce_distribute(rt, HostTensor(DType::kF32, {4, 3}), "None,None", mesh),
            TensorLayout({None, None}, mesh));
      },
      "must share their leading dimensions (rank >= 2), got x (5, 7) and dy (4, 3)");
  expect_value_error(
      [&] {
        matmul_backward_input(m, transpose(m), TensorLayout({None, None}, mesh));
      },
      "dy (…, N) must end in w's N for w (K, N), got dy (5, 7) and w (7, 5)");
}

}  // namespace meshlayout::testing
