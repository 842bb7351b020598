#include "meshlayout/ops/moe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/elementwise_test_util.h"

namespace meshlayout {
namespace {

using testing::distribute_on;
using ::testing::HasSubstr;

constexpr int64_t kExperts = 4, kD = 8, kF = 6, kTopK = 2;
const Shape kTokens{2, 3, kD};

class MoeOpTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  DeviceMesh mesh_ = DeviceMesh({2, 4}, {"data", "model"});

  Array on(const HostTensor& t, const std::string& layout) {
    return distribute_on(rt_, t, layout, mesh_);
  }
};

double value(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.data_as<double>()[i] : t.data_as<float>()[i];
}

// The float64 block on host tensors: Σ_slots w · (silu(x·g_e) ⊙ (x·u_e)) · d_e per row.
std::vector<double> reference(const HostTensor& x, const HostTensor& ids, const HostTensor& w,
                              const HostTensor& g, const HostTensor& u, const HostTensor& dn) {
  const int64_t rows = x.num_elements() / kD;
  std::vector<double> out(static_cast<size_t>(rows * kD));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < kTopK; ++j) {
      const int64_t e = ids.data_as<int32_t>()[r * kTopK + j];
      std::vector<double> h(kF);
      for (int64_t c = 0; c < kF; ++c) {
        double gv = 0, uv = 0;
        for (int64_t k = 0; k < kD; ++k) {
          gv += value(x, r * kD + k) * value(g, (e * kD + k) * kF + c);
          uv += value(x, r * kD + k) * value(u, (e * kD + k) * kF + c);
        }
        h[static_cast<size_t>(c)] = gv / (1 + std::exp(-gv)) * uv;
      }
      for (int64_t k = 0; k < kD; ++k) {
        double o = 0;
        for (int64_t c = 0; c < kF; ++c)
          o += h[static_cast<size_t>(c)] * value(dn, (e * kF + c) * kD + k);
        out[static_cast<size_t>(r * kD + k)] += value(w, r * kTopK + j) * o;
      }
    }
  }
  return out;
}

struct Operands {
  HostTensor x, logits, gate, up, down;
};

Operands random_operands(DType dtype, uint64_t seed) {
  return {HostTensor::random(dtype, kTokens, seed),
          HostTensor::random(dtype, {2, 3, kExperts}, seed + 1),
          HostTensor::random(dtype, {kExperts, kD, kF}, seed + 2),
          HostTensor::random(dtype, {kExperts, kD, kF}, seed + 3),
          HostTensor::random(dtype, {kExperts, kF, kD}, seed + 4)};
}

TEST_F(MoeOpTest, RoutingPicksTheLargestProbabilitiesAndNormalises) {
  const HostTensor logits = HostTensor::random(DType::kF64, {6, 5}, 3);
  for (const char* layout : {"None,None", "data,None", "None,model", "model,data"}) {
    for (bool normalize : {true, false}) {
      SCOPED_TRACE(std::string(layout) + (normalize ? " normalised" : ""));
      const ExpertRouting r = route_experts(on(logits, layout), 3, normalize);
      const HostTensor ids = r.ids.gather(), w = r.weights.gather(), p = r.probs.gather();
      for (int64_t row = 0; row < 6; ++row) {
        std::vector<double> probs(5);
        double sum = 0;
        for (int64_t e = 0; e < 5; ++e) sum += probs[e] = std::exp(value(logits, row * 5 + e));
        std::vector<int> order(5);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int a, int b) { return probs[a] > probs[b]; });
        double chosen = 0;
        for (int j = 0; j < 3; ++j) chosen += probs[order[j]] / sum;
        for (int j = 0; j < 3; ++j) {
          EXPECT_EQ(ids.data_as<int32_t>()[row * 3 + j], order[j]);
          const double want = probs[order[j]] / sum / (normalize ? chosen : 1.0);
          EXPECT_NEAR(w.data_as<double>()[row * 3 + j], want, 1e-14);
        }
        for (int64_t e = 0; e < 5; ++e)
          EXPECT_NEAR(p.data_as<double>()[row * 5 + e], probs[e] / sum, 1e-15);
      }
    }
  }
}

// Every way to place tokens and experts gives the float64 reference: replicated experts, experts
// over the tokens' own axis (dispatch by gathering), experts and F over both axes, d split.
TEST_F(MoeOpTest, ForwardMatchesTheReferenceInEveryLayout) {
  const Operands h = random_operands(DType::kF64, 20);
  const ExpertRouting route = route_experts(on(h.logits, "data,None,None"), kTopK, true);
  const HostTensor ids = route.ids.gather(), w = route.weights.gather();
  const std::vector<double> want = reference(h.x, ids, w, h.gate, h.up, h.down);
  struct Case {
    const char *x, *gate, *down;
  };
  for (const Case& c : {Case{"data,None,None", "None,None,None", "None,None,None"},
                        Case{"data,None,None", "model,None,None", "model,None,None"},
                        Case{"data,None,None", "data,None,None", "data,None,None"},
                        Case{"None,model,None", "data,None,model", "data,model,None"},
                        Case{"data,None,model", "None,model,None", "None,None,model"},
                        Case{"None,None,None", "model,None,data", "model,data,None"}}) {
    SCOPED_TRACE(fmt::format("x {} gate {} down {}", c.x, c.gate, c.down));
    const Array x = on(h.x, c.x);
    const Array y = expert_mixture(x, route.ids, route.weights, on(h.gate, c.gate),
                                   on(h.up, c.gate), on(h.down, c.down), GateFunction::kSilu);
    EXPECT_EQ(y.layout(), x.layout());
    const HostTensor got = y.gather();
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      EXPECT_NEAR(got.data_as<double>()[i], want[static_cast<size_t>(i)], 1e-12) << i;
    }
  }
}

// Top-2 in F32: expert parallelism gives the replicated experts' bits.
TEST_F(MoeOpTest, ExpertParallelEqualsReplicatedBitForBitWithTwoExpertsPerToken) {
  const Operands h = random_operands(DType::kF32, 40);
  const ExpertRouting route = route_experts(on(h.logits, "data,None,None"), kTopK, true);
  const auto run = [&](const char* gate, const char* down) {
    return expert_mixture(on(h.x, "data,None,None"), route.ids, route.weights, on(h.gate, gate),
                          on(h.up, gate), on(h.down, down), GateFunction::kSilu)
        .gather();
  };
  const HostTensor replicated = run("None,None,None", "None,None,None");
  EXPECT_EQ(run("model,None,None", "model,None,None"), replicated);
  EXPECT_EQ(run("data,None,None", "data,None,None"), replicated);
}

// L = Σ dy ⊙ y: every gradient against central differences of the distributed forward.
TEST_F(MoeOpTest, BackwardMatchesFiniteDifferencesInEveryLayout) {
  Operands h = random_operands(DType::kF64, 60);
  const ExpertRouting route = route_experts(on(h.logits, "data,None,None"), kTopK, false);
  HostTensor w = route.weights.gather();
  const HostTensor ids = route.ids.gather(), dy = HostTensor::random(DType::kF64, kTokens, 66);
  struct Case {
    const char *x, *gate, *down;
  };
  for (const Case& c : {Case{"data,None,None", "None,None,None", "None,None,None"},
                        Case{"data,None,None", "data,None,None", "data,None,None"},
                        Case{"None,model,None", "data,None,model", "data,model,None"},
                        Case{"data,None,model", "model,data,None", "model,None,data"}}) {
    SCOPED_TRACE(fmt::format("x {} gate {} down {}", c.x, c.gate, c.down));
    const auto loss = [&]() {
      const HostTensor y = expert_mixture(on(h.x, c.x), on(ids, "data,None,None"),
                                          on(w, "None,None,None"), on(h.gate, c.gate),
                                          on(h.up, c.gate), on(h.down, c.down), GateFunction::kSilu)
                               .gather();
      double l = 0;
      for (int64_t i = 0; i < y.num_elements(); ++i) l += y.data_as<double>()[i] * value(dy, i);
      return l;
    };
    const ExpertMixtureGrads g = expert_mixture_backward(
        on(h.x, c.x), on(ids, "data,None,None"), on(w, "None,None,None"), on(h.gate, c.gate),
        on(h.up, c.gate), on(h.down, c.down), on(dy, "None,model,None"), GateFunction::kSilu);
    EXPECT_EQ(g.dgate.layout().to_string(), on(h.gate, c.gate).layout().to_string());
    const auto check = [&](HostTensor& t, const Array& grad, const char* name) {
      const HostTensor got = grad.gather();
      for (int64_t i = 0; i < t.num_elements(); i += 7) {
        const double keep = t.data_as<double>()[i], step = 1e-6;
        t.data_as<double>()[i] = keep + step;
        const double up = loss();
        t.data_as<double>()[i] = keep - step;
        const double down = loss();
        t.data_as<double>()[i] = keep;
        EXPECT_NEAR(got.data_as<double>()[i], (up - down) / (2 * step), 1e-7) << name << " " << i;
      }
    };
    check(h.x, g.dx, "dx");
    check(w, g.dweights, "dweights");
    check(h.gate, g.dgate, "dgate");
    check(h.up, g.dup, "dup");
    check(h.down, g.ddown, "ddown");
  }
}

// L = Σ dw ⊙ weights + Σ c ⊙ p, the choice held fixed: dL/dlogits by central differences.
TEST_F(MoeOpTest, RoutingBackwardMatchesFiniteDifferences) {
  HostTensor logits = HostTensor::random(DType::kF64, {5, 6}, 80);
  const HostTensor dw = HostTensor::random(DType::kF64, {5, 2}, 81);
  const std::vector<double> c{0.3, -0.2, 0.5, 0.1, -0.4, 0.25};
  for (bool normalize : {true, false}) {
    const auto loss = [&]() {
      const ExpertRouting r = route_experts(on(logits, "data,None"), 2, normalize);
      const HostTensor w = r.weights.gather(), p = r.probs.gather();
      double l = 0;
      for (int64_t i = 0; i < 10; ++i) l += w.data_as<double>()[i] * value(dw, i);
      for (int64_t i = 0; i < 30; ++i) l += p.data_as<double>()[i] * c[static_cast<size_t>(i % 6)];
      return l;
    };
    const ExpertRouting r = route_experts(on(logits, "data,None"), 2, normalize);
    const HostTensor got = route_experts_backward(r, on(dw, "None,None"), normalize, &c).gather();
    for (int64_t i = 0; i < 30; ++i) {
      const double keep = logits.data_as<double>()[i], step = 1e-6;
      logits.data_as<double>()[i] = keep + step;
      const double up = loss();
      logits.data_as<double>()[i] = keep - step;
      const double down = loss();
      logits.data_as<double>()[i] = keep;
      EXPECT_NEAR(got.data_as<double>()[i], (up - down) / (2 * step), 1e-8) << i;
    }
  }
}

TEST_F(MoeOpTest, StatisticsCountEveryTokenOnce) {
  const HostTensor logits = HostTensor::random(DType::kF64, {2, 3, kExperts}, 90);
  const ExpertRouting r = route_experts(on(logits, "data,None,None"), kTopK, true);
  const ExpertStatistics s = expert_statistics(r);
  EXPECT_EQ(s.tokens, 6);
  EXPECT_DOUBLE_EQ(std::accumulate(s.counts.begin(), s.counts.end(), 0.0), 12.0);
  EXPECT_NEAR(std::accumulate(s.prob_sums.begin(), s.prob_sums.end(), 0.0), 6.0, 1e-12);
}

TEST_F(MoeOpTest, RefusesMismatchedOperandsNamingThem) {
  const Operands h = random_operands(DType::kF32, 100);
  const ExpertRouting r = route_experts(on(h.logits, "None,None,None"), kTopK, true);
  const Array x = on(h.x, "None,None,None");
  const Array g = on(h.gate, "None,None,None"), u = on(h.up, "None,None,None");
  EXPECT_THAT(
      [&] {
        expert_mixture(x, r.ids, r.weights, g, u, on(h.up, "None,None,None"), GateFunction::kSilu);
      },
      ::testing::ThrowsMessage<ValueError>(HasSubstr("down (E, F, d)")));
  EXPECT_THAT(
      [&] {
        expert_mixture(x, r.ids, r.weights, g, on(h.up, "model,None,None"),
                       on(h.down, "None,None,None"), GateFunction::kSilu);
      },
      ::testing::ThrowsMessage<ValueError>(HasSubstr("up must be split as gate")));
  EXPECT_THAT([&] { route_experts(on(h.logits, "None,None,None"), 5, true); },
              ::testing::ThrowsMessage<ValueError>(HasSubstr("top_k must be in [1, 4]")));
}

}  // namespace
}  // namespace meshlayout
