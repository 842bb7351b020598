// attention_backward and apply_rotary_embedding_backward against float64 central differences of
// a float64 host forward written from the formulas (softmax(scale·q·kᵀ + mask)·v, grouped heads,
// causal with an offset, key_length, key padding mask; rotate-half RoPE), on mesh[data=2,model=4]
// in every layout the forward handles: replicated, batch split, Megatron heads, grouped KV heads
// aligned with the head split and replicated over it (partial sums over the head axes), heads
// over two axes, a split sequence; in one process and as 2 and 4 threads-as-processes. In F64
// (computed in double) against a five-point stencil, to 1e-10 of the largest gradient.
#include "meshlayout/ops/attention_backward.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using Vec = std::vector<double>;

struct Sizes {
  int64_t B, T, S, Hq, Hkv, D;
};

Vec doubles(const HostTensor& t) {
  if (t.dtype() == DType::kF64) {
    const double* p = t.data_as<double>();
    return Vec(p, p + num_elements(t.shape()));
  }
  const float* p = t.data_as<float>();
  return Vec(p, p + num_elements(t.shape()));
}

// `t` (F32) in `dtype`: itself, or its values widened to F64 (exactly).
HostTensor in_dtype(const HostTensor& t, DType dtype) {
  if (dtype == DType::kF32) return t;
  HostTensor out(DType::kF64, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.data_as<double>()[i] = t.data_as<float>()[i];
  return out;
}

// The forward in double, from the formulas: out[b,t,h] = Σ_s softmax_s(scale·q·k_s) v_s over the
// visible keys of query head h (key/value head h / (Hq / Hkv)); no visible key: zeros.
Vec ref_attention(const Vec& q, const Vec& k, const Vec& v, const Sizes& z,
                  const AttentionOptions& o, const std::vector<int>* mask) {
  const int64_t L = o.key_length < 0 ? z.S : o.key_length, r = z.Hq / z.Hkv;
  const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(z.D));
  Vec out(static_cast<size_t>(z.B * z.T * z.Hq * z.D), 0.0);
  const auto qi = [&](int64_t b, int64_t t, int64_t h) {
    return static_cast<size_t>(((b * z.T + t) * z.Hq + h) * z.D);
  };
  const auto ki = [&](int64_t b, int64_t s, int64_t j) {
    return static_cast<size_t>(((b * z.S + s) * z.Hkv + j) * z.D);
  };
  for (int64_t b = 0; b < z.B; ++b) {
    for (int64_t t = 0; t < z.T; ++t) {
      for (int64_t h = 0; h < z.Hq; ++h) {
        Vec w;
        std::vector<int64_t> keys;
        for (int64_t s = 0; s < L; ++s) {
          if (o.causal && s > t + o.query_offset) continue;
          if (o.sliding_window > 0 && s <= t + o.query_offset - o.sliding_window) continue;
          if (mask && (*mask)[static_cast<size_t>(b * z.S + s)] == 0) continue;
          double dot = 0;
          for (int64_t d = 0; d < z.D; ++d)
            dot += q[qi(b, t, h) + static_cast<size_t>(d)] *
                   k[ki(b, s, h / r) + static_cast<size_t>(d)];
          w.push_back(o.logit_soft_cap > 0
                          ? o.logit_soft_cap * std::tanh(dot * scale / o.logit_soft_cap)
                          : dot * scale);
          keys.push_back(s);
        }
        if (w.empty()) continue;
        const double m = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (size_t i = 0; i < keys.size(); ++i) {
          for (int64_t d = 0; d < z.D; ++d) {
            out[qi(b, t, h) + static_cast<size_t>(d)] +=
                w[i] / sum * v[ki(b, keys[i], h / r) + static_cast<size_t>(d)];
          }
        }
      }
    }
  }
  return out;
}

struct RefGrads {
  Vec dq, dk, dv;
};

// Central differences of Σ out ⊙ g with respect to every element of q, k and v: two points
// (h = 1e-6, error ~1e-9 of the gradient), or five (h = 1e-3, error ~1e-12: the F64 checks).
RefGrads finite_differences(Vec q, Vec k, Vec v, const Vec& g, const Sizes& z,
                            const AttentionOptions& o, const std::vector<int>* mask,
                            bool five_point = false) {
  const double h = five_point ? 1e-3 : 1e-6;
  const auto loss = [&] {
    const Vec out = ref_attention(q, k, v, z, o, mask);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
    return l;
  };
  const auto grad = [&](Vec& x) {
    Vec d(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      const auto at = [&](double step) {
        x[i] = x0 + step;
        return loss();
      };
      d[i] = five_point ? (at(-2 * h) - 8 * at(-h) + 8 * at(h) - at(2 * h)) / (12 * h)
                        : (at(h) - at(-h)) / (2 * h);
      x[i] = x0;
    }
    return d;
  };
  return RefGrads{grad(q), grad(k), grad(v)};
}

// Max |got − want| over max(|want|), checked against `rel`; returns it.
double expect_close(const HostTensor& got, const Vec& want, double rel, const std::string& what) {
  const Vec g = doubles(got);
  if (g.size() != want.size()) throw InternalError(what + ": sizes differ");
  double worst = 0, scale = 1e-30;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    if (std::abs(g[i] - want[i]) > worst) worst = std::abs(g[i] - want[i]), at = i;
  }
  if (worst > rel * scale) {
    throw InternalError(
        fmt::format("{}: element {} is {} against {} (max |error| {} over max |grad| {})", what, at,
                    g[at], want[at], worst, scale));
  }
  return worst / scale;
}

struct LayoutCase {
  std::vector<DimSharding> q, k, v;
  std::string what;
};

struct GradCase {
  Sizes z;
  AttentionOptions options;
  bool masked = false;
};

// Every layout × every case on `rt` in `dtype` (F32 within 1e-4 of the largest gradient, F64
// within 1e-10); returns the largest relative error seen.
double check_all(const std::shared_ptr<Runtime>& rt, const std::vector<GradCase>& cases,
                 const std::vector<LayoutCase>& layouts, uint64_t seed, DType dtype = DType::kF32) {
  const bool f64 = dtype == DType::kF64;
  const double tolerance = f64 ? 1e-10 : 1e-4;
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  double worst = 0;
  for (const GradCase& c : cases) {
    const Sizes& z = c.z;
    const HostTensor q =
        in_dtype(HostTensor::random(DType::kF32, {z.B, z.T, z.Hq, z.D}, seed), dtype);
    const HostTensor k =
        in_dtype(HostTensor::random(DType::kF32, {z.B, z.S, z.Hkv, z.D}, seed + 1), dtype);
    const HostTensor v =
        in_dtype(HostTensor::random(DType::kF32, {z.B, z.S, z.Hkv, z.D}, seed + 2), dtype);
    const HostTensor g =
        in_dtype(HostTensor::random(DType::kF32, {z.B, z.T, z.Hq, z.D}, seed + 3), dtype);
    // Row 0 attends its even keys, row 1 none (zero gradient).
    std::vector<int> mask(static_cast<size_t>(z.B * z.S), 0);
    for (int64_t s = 0; s < z.S; s += 2) mask[static_cast<size_t>(s)] = 1;
    HostTensor mh(DType::kI32, {z.B, z.S});
    std::copy(mask.begin(), mask.end(), mh.data_as<int32_t>());
    const std::vector<int>* m = c.masked ? &mask : nullptr;
    const RefGrads want =
        finite_differences(doubles(q), doubles(k), doubles(v), doubles(g), z, c.options, m, f64);
    for (const LayoutCase& l : layouts) {
      const std::string what = fmt::format(
          "{} B{} T{} S{} Hq{} Hkv{} D{} causal {} offset {} key_length {} "
          "mask {} scale {} window {} cap {}; {}",
          dtype_name(dtype), z.B, z.T, z.S, z.Hq, z.Hkv, z.D, c.options.causal,
          c.options.query_offset, c.options.key_length, c.masked, c.options.scale,
          c.options.sliding_window, c.options.logit_soft_cap, l.what);
      const DistributeOptions d{.runtime = rt};
      const Array qa = distribute_tensor(q, TensorLayout(l.q, mesh), d);
      const Array ka = distribute_tensor(k, TensorLayout(l.k, mesh), d);
      const Array va = distribute_tensor(v, TensorLayout(l.v, mesh), d);
      const Array ga = distribute_tensor(g, TensorLayout(l.q, mesh), d);
      const Array ma = distribute_tensor(mh, TensorLayout({None, "model"}, mesh), d);
      AttentionOptions o = c.options;
      if (c.masked) o.key_mask = &ma;
      const AttentionGrads got = attention_backward(qa, ka, va, ga, o);
      if (got.dq.dtype() != dtype || got.dk.dtype() != dtype || got.dv.dtype() != dtype) {
        throw InternalError(fmt::format("{}: gradients in {}, {}, {}", what,
                                        dtype_name(got.dq.dtype()), dtype_name(got.dk.dtype()),
                                        dtype_name(got.dv.dtype())));
      }
      if (got.dq.layout() != qa.layout() || got.dk.layout() != ka.layout() ||
          got.dv.layout() != va.layout()) {
        throw InternalError(fmt::format("{}: gradients laid out as {}, {}, {}", what,
                                        got.dq.layout().to_string(), got.dk.layout().to_string(),
                                        got.dv.layout().to_string()));
      }
      worst = std::max(worst, expect_close(got.dq.gather(), want.dq, tolerance, "dq " + what));
      worst = std::max(worst, expect_close(got.dk.gather(), want.dk, tolerance, "dk " + what));
      worst = std::max(worst, expect_close(got.dv.gather(), want.dv, tolerance, "dv " + what));
    }
  }
  return worst;
}

std::vector<LayoutCase> every_layout() {
  const std::vector<DimSharding> rep{None, None, None, None}, batch{"data", None, None, None},
      megatron{"data", None, "model", None};
  return {
      {rep, rep, rep, "replicated"},
      {batch, batch, batch, "batch split"},
      {megatron, megatron, megatron, "Megatron heads on model, batch on data"},
      {{None, None, DimSharding({"data", "model"}), None},
       rep,
       rep,
       "query heads over (data, model)"},
      {{None, "model", None, None},
       {None, None, None, "model"},
       {"data", "model", None, None},
       "split sequence and head_dim"},
      {megatron,
       {None, "model", None, None},
       {None, None, "model", "data"},
       "k and v in other layouts"},
  };
}

class AttentionBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(AttentionBackwardTest, GradientsMatchFiniteDifferencesOnEveryLayout) {
  const std::vector<GradCase> cases = {
      {{2, 5, 5, 4, 4, 4}, {.causal = true}},  // MHA, heads split evenly
      {{2, 5, 5, 4, 2, 4}, {.causal = true}},  // GQA: 2 KV heads on 4, replicated
      {{2, 5, 5, 4, 2, 4}, {.causal = false}},
      {{2, 5, 5, 8, 4, 4}, {.causal = false}},                   // GQA aligned with the split
      {{2, 5, 5, 4, 1, 4}, {.causal = true}},                    // one KV head
      {{3, 4, 4, 6, 3, 2}, {.causal = true}},                    // uneven batch and heads
      {{2, 5, 7, 4, 2, 4}, {.causal = false}, /*masked=*/true},  // padding, a row with no key
      {{2, 3, 8, 4, 2, 6}, {.causal = true, .query_offset = 3, .key_length = 6}},  // decode-like
      {{2, 4, 6, 8, 2, 4},
       {.causal = true, .query_offset = 2, .key_length = 5, .scale = 0.3},
       true},
      {{2, 6, 6, 4, 2, 4}, {.causal = true, .sliding_window = 3}},    // Mistral's window
      {{2, 5, 5, 4, 2, 4}, {.causal = true, .logit_soft_cap = 0.7}},  // Gemma 2's soft cap
      {{2, 6, 6, 4, 4, 4}, {.causal = true, .sliding_window = 4, .logit_soft_cap = 2.0}, true},
      {{2, 3, 8, 4, 2, 4},
       {.causal = true, .query_offset = 3, .key_length = 6, .sliding_window = 3},
       true},
  };
  const double worst = check_all(Runtime::single_process(8), cases, every_layout(), 11);
  std::printf("[ info     ] max relative error against central differences: %.3g\n", worst);
  const double worst64 =
      check_all(Runtime::single_process(8), cases, every_layout(), 11, DType::kF64);
  std::printf("[ info     ] F64: max relative error against a five-point stencil: %.3g\n", worst64);
}

TEST_F(AttentionBackwardTest, PartialSumsCrossThreadsAsProcesses) {
  const std::vector<GradCase> cases = {
      {{2, 5, 5, 4, 2, 4}, {.causal = true}},
      {{2, 5, 6, 8, 2, 4}, {.causal = false}, true},
      {{2, 5, 5, 8, 4, 4}, {.causal = true}},
  };
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes", procs));
    testing::run_as_processes(
        procs, 8 / procs,
        [&](std::shared_ptr<Runtime> rt) {
          (void)check_all(rt, cases, every_layout(), 21);
          (void)check_all(rt, cases, every_layout(), 21, DType::kF64);
        },
        /*pool_threads=*/2);
  }
}

// Σ rope(x) ⊙ g in double (HF rotate_half at positions start + t).
double ref_rope_loss(const Vec& x, const Vec& g, const Shape& s, int64_t start, double theta) {
  const int64_t D = s[3], half = D / 2;
  double l = 0;
  for (int64_t row = 0; row < s[0] * s[1] * s[2]; ++row) {
    const int64_t t = (row / s[2]) % s[1];
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(start + t) *
                       std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const size_t i1 = static_cast<size_t>(row * D + i), i2 = i1 + static_cast<size_t>(half);
      l += (x[i1] * std::cos(a) - x[i2] * std::sin(a)) * g[i1] +
           (x[i2] * std::cos(a) + x[i1] * std::sin(a)) * g[i2];
    }
  }
  return l;
}

TEST_F(AttentionBackwardTest, RotaryBackwardMatchesFiniteDifferences) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{2, 5, 3, 8};
  // The loss is linear in x: any step is exact but for rounding; F64 takes a large one.
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    const HostTensor x = in_dtype(HostTensor::random(DType::kF32, shape, 31), dtype);
    const HostTensor g = in_dtype(HostTensor::random(DType::kF32, shape, 32), dtype);
    const double h = dtype == DType::kF64 ? 0.5 : 1e-6;
    for (const int64_t start : {int64_t{0}, int64_t{7}}) {
      Vec xv = doubles(x);
      const Vec gv = doubles(g);
      Vec want(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        const double x0 = xv[i];
        xv[i] = x0 + h;
        const double up = ref_rope_loss(xv, gv, shape, start, 500.0);
        xv[i] = x0 - h;
        const double down = ref_rope_loss(xv, gv, shape, start, 500.0);
        xv[i] = x0;
        want[i] = (up - down) / (2 * h);
      }
      for (const TensorLayout& layout : {TensorLayout({None, None, None, None}, mesh),
                                         TensorLayout({"data", "model", None, None}, mesh),
                                         TensorLayout({None, None, "data", "model"}, mesh)}) {
        const std::string what =
            fmt::format("{} start {} {}", dtype_name(dtype), start, layout.to_string());
        const Array ga = distribute_tensor(g, layout);
        const HostTensor before = ga.gather();
        const Array dx = apply_rotary_embedding_backward(ga, start, 500.0);
        EXPECT_EQ(dx.dtype(), dtype);
        EXPECT_NO_THROW(expect_close(dx.gather(), want, dtype == DType::kF64 ? 1e-13 : 1e-5, what));
        EXPECT_TRUE(ga.gather() == before) << what << ": the copying form changed its input";
        Array moved = distribute_tensor(g, layout);
        const Array in_place = apply_rotary_embedding_backward(std::move(moved), start, 500.0);
        EXPECT_TRUE(in_place.gather() == dx.gather())
            << what << ": in-place and copying forms differ";
      }
    }
  }
}

TEST_F(AttentionBackwardTest, BadShapesAreNamed) {
  const DeviceMesh mesh({8}, {"x"});
  const auto make = [&](Shape s) {
    return distribute_tensor(HostTensor::random(DType::kF32, s, 1),
                             TensorLayout::replicated(static_cast<int>(s.size()), mesh));
  };
  const Array q = make({1, 2, 4, 4}), k = make({1, 3, 2, 4}), v = make({1, 3, 2, 4});
  EXPECT_TRUE(testing::HasSubstr(testing::ValueErrorMessage([&] {
                                   attention_backward(q, k, v, make({1, 2, 4, 2}));
                                 }),
                                 "d_out must have q's shape (1, 2, 4, 4), got d_out (1, 2, 4, 2)"));
  EXPECT_TRUE(
      testing::HasSubstr(testing::ValueErrorMessage([&] {
                           attention_backward(q, k, make({1, 3, 3, 4}), q);
                         }),
                         "equal shapes, got q (1, 2, 4, 4), k (1, 3, 2, 4), v (1, 3, 3, 4)"));
  EXPECT_TRUE(testing::HasSubstr(testing::ValueErrorMessage([&] {
                                   attention_backward(q, make({1, 3, 3, 4}), make({1, 3, 3, 4}), q);
                                 }),
                                 "query heads (4) must be a multiple of the key/value heads (3)"));
  EXPECT_TRUE(testing::HasSubstr(
      testing::ValueErrorMessage([&] { attention_backward(q, k, v, q, {.key_length = 4}); }),
      "key_length 4 is outside [0, 3]"));
  EXPECT_TRUE(testing::HasSubstr(testing::ValueErrorMessage([&] {
                                   apply_rotary_embedding_backward(make({1, 2, 1, 3}), 0, 1e4);
                                 }),
                                 "even head_dim, got (1, 2, 1, 3) F32"));
  // No implicit cast: q, k, v and d_out share one float dtype.
  const Array q64 =
      distribute_tensor(in_dtype(HostTensor::random(DType::kF32, {1, 2, 4, 4}, 1), DType::kF64),
                        TensorLayout::replicated(4, mesh));
  EXPECT_TRUE(
      testing::HasSubstr(testing::ValueErrorMessage([&] { attention_backward(q, k, v, q64); }),
                         "one dtype for all, got q F32, k F32, v F32, d_out F64"));
}

}  // namespace
}  // namespace meshlayout
