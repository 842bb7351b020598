// attention_backward under a real mpirun (np 2 and 4): grouped KV heads replicated over the
// 'model' axis (2 KV heads on 4) with the batch on 'data', so dk and dv are partial sums over
// 'model' reduced across processes into k's and v's layouts; checked on every rank against
// float64 central differences of a float64 host forward. The main() is mpi_gtest_main.cc's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "meshlayout/ops/attention_backward.h"

namespace meshlayout {
namespace {

using Vec = std::vector<double>;
constexpr int64_t B = 2, T = 5, Hq = 4, Hkv = 2, D = 4;

Vec doubles(const HostTensor& t) {
  return Vec(t.data_as<float>(), t.data_as<float>() + num_elements(t.shape()));
}

// Σ out ⊙ g of causal softmax(q·kᵀ/√D)·v in double, query head h on KV head h / (Hq / Hkv).
double loss(const Vec& q, const Vec& k, const Vec& v, const Vec& g) {
  double l = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t j = h / (Hq / Hkv);
        const size_t qi = static_cast<size_t>(((b * T + t) * Hq + h) * D);
        Vec w(static_cast<size_t>(t + 1));
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[qi + static_cast<size_t>(d)] *
                   k[static_cast<size_t>(((b * T + s) * Hkv + j) * D + d)];
          w[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(D));
        }
        const double m = *std::max_element(w.begin(), w.end());
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - m));
        for (int64_t s = 0; s <= t; ++s) {
          for (int64_t d = 0; d < D; ++d) {
            l += w[static_cast<size_t>(s)] / sum *
                 v[static_cast<size_t>(((b * T + s) * Hkv + j) * D + d)] *
                 g[qi + static_cast<size_t>(d)];
          }
        }
      }
    }
  }
  return l;
}

void expect_matches_differences(const HostTensor& got, Vec& x, const std::function<double()>& f,
                                const char* what) {
  const Vec g = doubles(got);
  ASSERT_EQ(g.size(), x.size()) << what;
  Vec want(x.size());
  double scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + 1e-6;
    const double up = f();
    x[i] = x0 - 1e-6;
    const double down = f();
    x[i] = x0;
    want[i] = (up - down) / 2e-6;
    scale = std::max(scale, std::abs(want[i]));
  }
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(g[i], want[i], 1e-4 * scale) << what << " element " << i;
}

TEST(AttentionBackwardMpiTest, ReplicatedKeyValueHeadsSumTheirPartialsAcrossProcesses) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const HostTensor q = HostTensor::random(DType::kF32, {B, T, Hq, D}, 41);
  const HostTensor k = HostTensor::random(DType::kF32, {B, T, Hkv, D}, 42);
  const HostTensor v = HostTensor::random(DType::kF32, {B, T, Hkv, D}, 43);
  const HostTensor g = HostTensor::random(DType::kF32, {B, T, Hq, D}, 44);
  const TensorLayout heads({"data", None, "model", None}, mesh);
  const Array qa = distribute_tensor(q, heads), ga = distribute_tensor(g, heads);
  const Array ka = distribute_tensor(k, heads);  // uneven: 2 on 4
  const Array va =
      distribute_tensor(v, TensorLayout({"data", None, None, None}, mesh));  // replicated heads
  const AttentionGrads got = attention_backward(qa, ka, va, ga, {.causal = true});
  EXPECT_EQ(got.dq.layout(), heads);
  EXPECT_EQ(got.dk.layout(), heads);
  EXPECT_EQ(got.dv.layout(), va.layout());
  Vec qv = doubles(q), kv = doubles(k), vv = doubles(v);
  const Vec gv = doubles(g);
  const auto f = [&] { return loss(qv, kv, vv, gv); };
  expect_matches_differences(got.dq.gather(), qv, f, "dq");
  expect_matches_differences(got.dk.gather(), kv, f, "dk");
  expect_matches_differences(got.dv.gather(), vv, f, "dv");
}

}  // namespace
}  // namespace meshlayout
