// merge_test_util.h — functional graphs with merge layers, shared by the in-process and mpirun
// tests (test-only): a residual block x + d1(x) → d2 and a two-input model
// concatenate(a, b) → d, … , each built under LayoutMap rules and checked against a float64
// host reference. Failures throw InternalError naming the case.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/merging/merge.h"
#include "meshlayout/nn/model.h"

namespace meshlayout::testing {

struct HostMatrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

inline HostMatrix to_matrix(const HostTensor& t) {
  HostMatrix m{t.shape().size() == 1 ? 1 : t.shape()[0], t.shape().back(), {}};
  for (int64_t i = 0; i < t.num_elements(); ++i) m.v.push_back(t.data_as<float>()[i]);
  return m;
}

/// x @ kernel + bias of a built Dense, in float64.
inline HostMatrix dense_ref(const HostMatrix& x, const Dense& d) {
  const HostMatrix w = to_matrix(d.kernel()->value().gather());
  const HostMatrix b = to_matrix(d.bias()->value().gather());
  HostMatrix y{x.rows, w.cols, std::vector<double>(static_cast<size_t>(x.rows * w.cols))};
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < w.cols; ++c) {
      double s = b.at(0, c);
      for (int64_t k = 0; k < x.cols; ++k) s += x.at(r, k) * w.at(k, c);
      y.at(r, c) = s;
    }
  }
  return y;
}

inline void expect_close(const HostTensor& got, const HostMatrix& want, const std::string& where) {
  const HostMatrix g = to_matrix(got);
  if (g.rows != want.rows || g.cols != want.cols) {
    throw InternalError(
        fmt::format("{}: shape ({}, {}) != ({}, {})", where, g.rows, g.cols, want.rows, want.cols));
  }
  for (size_t i = 0; i < want.v.size(); ++i) {
    if (std::fabs(g.v[i] - want.v[i]) > 1e-5 * (1 + std::fabs(want.v[i]))) {
      throw InternalError(
          fmt::format("{}: element {} is {} but should be {}", where, i, g.v[i], want.v[i]));
    }
  }
}

/// y = d2(x + d1(x)), d1 column-parallel and d2 row-parallel over 'model' (Megatron), the
/// input in `input_layout`; and z = d(concatenate(a, b) * e(a)) with two inputs.
inline void run_merge_cases(const std::shared_ptr<Runtime>& rt, const DeviceMesh& mesh,
                            const std::string& input_layout, uint64_t seed) {
  clear_session();
  LayoutMap rules(mesh);
  rules["d1.kernel"] = {None, "model"};
  rules["d1.bias"] = {"model"};
  rules["d2.kernel"] = {"model", None};
  rules["e.kernel"] = {None, "model"};
  std::shared_ptr<Model> residual, two_inputs;
  std::shared_ptr<Dense> d1, d2, d, e;
  {
    LayoutMapScope scope = rules.scope();
    Tensor x = Input({16}, 8);
    d1 = std::make_shared<Dense>(16, DenseOptions{.name = "d1"});
    d2 = std::make_shared<Dense>(4, DenseOptions{.name = "d2"});
    residual = Model::functional(x, (*d2)(std::make_shared<Add>()->apply({x, (*d1)(x)})));
    Tensor a = Input({6}, 8), b = Input({2}, 8);
    e = std::make_shared<Dense>(8, DenseOptions{.name = "e"});
    d = std::make_shared<Dense>(3, DenseOptions{.name = "d"});
    Tensor joined = std::make_shared<Concatenate>()->apply({a, b});
    two_inputs =
        Model::functional({a, b}, (*d)(std::make_shared<Multiply>()->apply({joined, (*e)(a)})));
  }
  const TensorLayout layout = TensorLayout::from_string(input_layout).with_device_mesh(mesh);
  const HostTensor hx = HostTensor::random(DType::kF32, {8, 16}, seed);
  const HostTensor ha = HostTensor::random(DType::kF32, {8, 6}, seed + 1);
  const HostTensor hb = HostTensor::random(DType::kF32, {8, 2}, seed + 2);
  const Tensor y = (*residual)(distribute_tensor(hx, layout, {.runtime = rt}));
  HostMatrix x = to_matrix(hx), h = dense_ref(x, *d1);
  for (size_t i = 0; i < h.v.size(); ++i) h.v[i] += x.v[i];
  expect_close(y.value().gather(), dense_ref(h, *d2), "residual, input " + input_layout);

  const Tensor z = two_inputs->apply({Tensor(distribute_tensor(ha, layout, {.runtime = rt})),
                                      Tensor(distribute_tensor(hb, layout, {.runtime = rt}))});
  const HostMatrix ma = to_matrix(ha), mb = to_matrix(hb), ea = dense_ref(ma, *e);
  HostMatrix m{8, 8, {}};
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t c = 0; c < 8; ++c)
      m.v.push_back((c < 6 ? ma.at(r, c) : mb.at(r, c - 6)) * ea.at(r, c));
  }
  expect_close(z.value().gather(), dense_ref(m, *d), "two inputs, layout " + input_layout);
}

}  // namespace meshlayout::testing
