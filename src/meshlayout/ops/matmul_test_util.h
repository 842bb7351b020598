// matmul_test_util.h — the matmul checks shared by the in-process, threads-as-processes and
// mpirun tests (test-only): a float64 host reference, a comparison at the bar (1e-5
// relative for F32), and the table of cases covering every sharding rule on mesh[data=2,model=4]
// and mesh[x=8] with even and uneven shapes. Failures throw InternalError naming the case.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/ops/matmul.h"

namespace meshlayout::testing {

/// Largest allowed |y - ref| / sum_k |x_ik| |w_kj| (the error bound of a dot product).
inline double matmul_tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-12; }

struct MatmulReference {
  Shape shape;                // (batch..., N)
  std::vector<double> value;  // row-major
  std::vector<double> scale;  // sum_k |x_ik| |w_kj|, the bound the error is measured against
};

inline double element(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? static_cast<double>(t.data_as<float>()[i])
                                  : t.data_as<double>()[i];
}

/// x (..., K) @ w (K, N) in float64 on the host.
inline MatmulReference reference_matmul(const HostTensor& x, const HostTensor& w) {
  MatmulReference r;
  r.shape = x.shape();
  r.shape.back() = w.shape()[1];
  const int64_t k = w.shape()[0], n = w.shape()[1],
                m = k == 0 ? num_elements(Shape(x.shape().begin(), x.shape().end() - 1))
                           : x.num_elements() / k;
  r.value.assign(static_cast<size_t>(m * n), 0.0);
  r.scale.assign(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = element(x, i * k + l) * element(w, l * n + j);
        sum += p;
        scale += std::fabs(p);
      }
      r.value[static_cast<size_t>(i * n + j)] = sum;
      r.scale[static_cast<size_t>(i * n + j)] = scale;
    }
  }
  return r;
}

/// Checks `count` values at global row-major offsets given by `offset_of(t)` against `ref`.
template <typename GetValue, typename OffsetOf>
void check_values(const MatmulReference& ref, DType dtype, int64_t count, GetValue value_at,
                  OffsetOf offset_of, const std::string& where) {
  const double tol = matmul_tolerance(dtype);
  for (int64_t t = 0; t < count; ++t) {
    const auto g = static_cast<size_t>(offset_of(t));
    const double got = value_at(t), want = ref.value[g];
    const double err = std::fabs(got - want);
    if (!(err <= tol * ref.scale[g]) && !(ref.scale[g] == 0 && got == 0)) {
      throw InternalError(
          fmt::format("{}: element {} is {} but the float64 reference is {} "
                      "(error {:.3g} > {} x {:.3g})",
                      where, g, got, want, err, tol, ref.scale[g]));
    }
  }
}

/// The gathered result, and every local shard (every replica), match the reference.
inline void expect_matches_reference(const Array& y, const HostTensor& gathered,
                                     const MatmulReference& ref, const std::string& where) {
  if (gathered.shape() != ref.shape) {
    throw InternalError(fmt::format("{}: result shape {} != expected {}", where,
                                    shape_to_string(gathered.shape()), shape_to_string(ref.shape)));
  }
  check_values(
      ref, y.dtype(), gathered.num_elements(), [&](int64_t t) { return element(gathered, t); },
      [](int64_t t) { return t; }, where + " (gathered)");
  for (const Array::Shard& s : y.local_shards()) {
    const Box& b = s.box;
    auto offset_of = [&](int64_t t) {
      int64_t off = 0, rest = t;
      std::vector<int64_t> c(b.shape.size());
      for (size_t d = b.shape.size(); d-- > 0;) {
        c[d] = b.offset[d] + rest % b.shape[d];
        rest /= b.shape[d];
      }
      for (size_t d = 0; d < c.size(); ++d) off = off * ref.shape[d] + c[d];
      return off;
    };
    auto value_at = [&](int64_t t) {
      return y.dtype() == DType::kF32
                 ? static_cast<double>(reinterpret_cast<const float*>(s.buffer.data())[t])
                 : reinterpret_cast<const double*>(s.buffer.data())[t];
    };
    check_values(ref, y.dtype(), b.num_elements(), value_at, offset_of,
                 fmt::format("{} (shard of {} at {})", where, s.box.to_string(), s.position));
  }
}

/// A layout's text without its mesh.
inline std::string bare_layout(const TensorLayout& l) { return TensorLayout(l.axes()).to_string(); }

struct MatmulCase {
  std::string name;
  std::string mesh;
  Shape x_shape, w_shape;
  std::string x_layout, w_layout;
  std::string output_layout;  // "" = default
  std::string expect_layout;  // layout of the result, without mesh
  MatmulReduction expect_reduction;
  bool expect_reshard = false;  // an operand is resharded first
};

/// Every rule of matmul_plan.h's table, on both meshes, with even and uneven shapes.
inline std::vector<MatmulCase> matmul_rule_cases() {
  using R = MatmulReduction;
  const std::string m24 = "mesh[data=2,model=4]", m8 = "mesh[x=8]";
  return {
      // batch-sharded x @ replicated w: no communication
      {"batch",
       m24,
       {16, 12},
       {12, 10},
       "data,None",
       "None,None",
       "",
       "layout[data,None]",
       R::kNone},
      {"batch uneven",
       m24,
       {7, 5},
       {5, 3},
       "data,None",
       "None,None",
       "",
       "layout[data,None]",
       R::kNone},
      {"batch 2 axes uneven",
       m24,
       {13, 9},
       {9, 6},
       "(data,model),None",
       "None,None",
       "",
       "layout[(data,model),None]",
       R::kNone},
      {"batch rank 3",
       m24,
       {4, 6, 8},
       {8, 5},
       "data,None,None",
       "None,None",
       "",
       "layout[data,None,None]",
       R::kNone},
      {"batch", m8, {32, 16}, {16, 8}, "x,None", "None,None", "", "layout[x,None]", R::kNone},
      {"batch uneven", m8, {5, 7}, {7, 3}, "x,None", "None,None", "", "layout[x,None]", R::kNone},
      // column-sharded w
      {"column",
       m24,
       {8, 12},
       {12, 16},
       "None,None",
       "None,model",
       "",
       "layout[None,model]",
       R::kNone},
      {"column uneven",
       m24,
       {5, 7},
       {7, 6},
       "None,None",
       "None,model",
       "",
       "layout[None,model]",
       R::kNone},
      {"batch x column",
       m24,
       {8, 12},
       {12, 16},
       "data,None",
       "None,model",
       "",
       "layout[data,model]",
       R::kNone},
      {"batch x column uneven rank 3",
       m24,
       {3, 3, 7},
       {7, 5},
       "None,data,None",
       "None,model",
       "",
       "layout[None,data,model]",
       R::kNone},
      {"column", m8, {8, 16}, {16, 32}, "None,None", "None,x", "", "layout[None,x]", R::kNone},
      {"column uneven", m8, {6, 9}, {9, 5}, "None,None", "None,x", "", "layout[None,x]", R::kNone},
      // K split over the same axes: partial sums, all-reduce
      {"row",
       m24,
       {8, 16},
       {16, 12},
       "None,model",
       "model,None",
       "",
       "layout[None,None]",
       R::kAllReduce},
      {"row uneven",
       m24,
       {5, 7},
       {7, 3},
       "None,model",
       "model,None",
       "",
       "layout[None,None]",
       R::kAllReduce},
      {"batch x row",
       m24,
       {8, 16},
       {16, 12},
       "data,model",
       "model,None",
       "",
       "layout[data,None]",
       R::kAllReduce},
      {"batch x row uneven rank 3",
       m24,
       {3, 5, 7},
       {7, 6},
       "data,None,model",
       "model,None",
       "",
       "layout[data,None,None]",
       R::kAllReduce},
      {"row over data x column",
       m24,
       {6, 8},
       {8, 12},
       "None,data",
       "data,model",
       "",
       "layout[None,model]",
       R::kAllReduce},
      {"row over 2 axes uneven",
       m24,
       {4, 11},
       {11, 5},
       "None,(data,model)",
       "(data,model),None",
       "",
       "layout[None,None]",
       R::kAllReduce},
      {"row", m8, {8, 32}, {32, 16}, "None,x", "x,None", "", "layout[None,None]", R::kAllReduce},
      {"row uneven, empty K blocks",
       m8,
       {6, 5},
       {5, 3},
       "None,x",
       "x,None",
       "",
       "layout[None,None]",
       R::kAllReduce},
      {"row rank 3",
       m8,
       {2, 3, 16},
       {16, 4},
       "None,None,x",
       "x,None",
       "",
       "layout[None,None,None]",
       R::kAllReduce},
      // empty extents: K = 0 gives zeros, empty batch or N an empty result
      {"row K = 0", m8, {4, 0}, {0, 3}, "None,x", "x,None", "", "layout[None,None]", R::kAllReduce},
      {"column K = 0",
       m24,
       {3, 0},
       {0, 9},
       "None,None",
       "None,model",
       "",
       "layout[None,model]",
       R::kNone},
      {"batch empty",
       m24,
       {0, 5},
       {5, 3},
       "data,None",
       "None,None",
       "",
       "layout[data,None]",
       R::kNone},
      {"row N = 0",
       m24,
       {4, 6},
       {6, 0},
       "data,model",
       "model,None",
       "",
       "layout[data,None]",
       R::kAllReduce},
      // partial sums reduce-scattered into the requested layout
      {"row reduce-scatter rows",
       m24,
       {16, 16},
       {16, 12},
       "data,model",
       "model,None",
       "(data,model),None",
       "layout[(data,model),None]",
       R::kReduceScatter},
      {"row reduce-scatter uneven",
       m24,
       {7, 9},
       {9, 5},
       "data,model",
       "model,None",
       "(data,model),None",
       "layout[(data,model),None]",
       R::kReduceScatter},
      {"row reduce-scatter N",
       m24,
       {6, 8},
       {8, 10},
       "data,model",
       "model,None",
       "data,model",
       "layout[data,model]",
       R::kReduceScatter},
      {"row reduce-scatter major",
       m24,
       {7, 8},
       {8, 3},
       "data,model",
       "model,None",
       "(model,data),None",
       "layout[(model,data),None]",
       R::kReduceScatter},
      {"row reduce into replicated",
       m24,
       {6, 64},
       {64, 4},
       "data,model",
       "model,None",
       "None,None",
       "layout[None,None]",
       R::kReduceScatter},
      {"row reduce-scatter",
       m8,
       {16, 16},
       {16, 8},
       "None,x",
       "x,None",
       "x,None",
       "layout[x,None]",
       R::kReduceScatter},
      {"row reduce-scatter uneven",
       m8,
       {5, 11},
       {11, 7},
       "None,x",
       "x,None",
       "None,x",
       "layout[None,x]",
       R::kReduceScatter},
      // anything else: operands resharded first
      {"replicated x @ row w",
       m24,
       {8, 16},
       {16, 8},
       "None,None",
       "model,None",
       "",
       "layout[None,None]",
       R::kAllReduce,
       true},
      {"column x @ column w",
       m24,
       {8, 12},
       {12, 8},
       "None,model",
       "None,model",
       "",
       "",
       R::kNone,
       true},
      {"batch axis on N", m24, {8, 6}, {6, 8}, "data,None", "None,data", "", "", R::kNone, true},
      {"K axes differ", m24, {8, 12}, {12, 8}, "None,data", "model,None", "", "", R::kNone, true},
      {"K axes differ uneven", m8, {5, 9}, {9, 7}, "x,None", "x,None", "", "", R::kNone, true},
      {"output reshard",
       m24,
       {8, 6},
       {6, 5},
       "data,None",
       "None,None",
       "None,data",
       "layout[None,data]",
       R::kNone},
      {"output reshard",
       m8,
       {9, 6},
       {6, 5},
       "x,None",
       "None,None",
       "None,None",
       "layout[None,None]",
       R::kNone},
  };
}

/// Runs one case on `rt` (every process of rt's group must run the same cases in the same
/// order). An empty expect_layout is checked against the plan only (the reshard depends on the
/// shapes). Throws InternalError describing the first mismatch.
inline MatmulPlan run_matmul_case(const std::shared_ptr<Runtime>& rt, const MatmulCase& c,
                                  DType dtype, uint64_t seed) {
  const std::string where =
      fmt::format("case '{}' on {}: x {} {} @ w {} {}{}", c.name, c.mesh,
                  shape_to_string(c.x_shape), c.x_layout, shape_to_string(c.w_shape), c.w_layout,
                  c.output_layout.empty() ? "" : " -> " + c.output_layout);
  const DeviceMesh mesh = DeviceMesh::from_string(c.mesh);
  const HostTensor xh = HostTensor::random(dtype, c.x_shape, seed);
  const HostTensor wh = HostTensor::random(dtype, c.w_shape, seed + 1);
  Array x = distribute_tensor(xh, TensorLayout::from_string(c.x_layout).with_device_mesh(mesh),
                              {.runtime = rt});
  Array w = distribute_tensor(wh, TensorLayout::from_string(c.w_layout).with_device_mesh(mesh),
                              {.runtime = rt});
  MatmulPlan plan;
  MatmulOptions options{.plan_out = &plan};
  if (!c.output_layout.empty()) options.output_layout = TensorLayout::from_string(c.output_layout);
  Array y = matmul(x, w, options);
  auto fail = [&](const std::string& what) {
    throw InternalError(fmt::format("{}: {}\n{}", where, what, plan.to_string()));
  };
  if (!(y.layout() == plan.output_layout)) fail("result layout differs from the plan's");
  if (!c.expect_layout.empty() && bare_layout(y.layout()) != c.expect_layout) {
    fail(fmt::format("result layout {}, expected {}", bare_layout(y.layout()), c.expect_layout));
  }
  if (!c.expect_reshard && c.output_layout.empty() &&
      !(y.layout() == matmul_output_layout(x.layout(), w.layout()))) {
    fail("result layout differs from matmul_output_layout");
  }
  if ((plan.reshard_x || plan.reshard_w) != c.expect_reshard) {
    fail(c.expect_reshard ? "expected an operand reshard" : "unexpected operand reshard");
  }
  if (!c.expect_reshard && plan.reduction != c.expect_reduction) {
    fail(fmt::format("reduction {}, expected {}", reduction_name(plan.reduction),
                     reduction_name(c.expect_reduction)));
  }
  expect_matches_reference(y, y.gather(), reference_matmul(xh, wh), where);
  return plan;
}

/// Every case of matmul_rule_cases() for F32 (and the first few for F64).
inline void run_all_matmul_cases(const std::shared_ptr<Runtime>& rt, uint64_t seed) {
  const std::vector<MatmulCase> cases = matmul_rule_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    run_matmul_case(rt, cases[i], DType::kF32, seed + 2 * i);
    if (i % 4 == 0) run_matmul_case(rt, cases[i], DType::kF64, seed + 2 * i);
  }
}

}  // namespace meshlayout::testing
