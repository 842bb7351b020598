// The all-to-all token dispatcher (moe_dispatch.h) through expert_mixture and its backward: equal
// to the all-gather dispatcher and to replicated experts, in one process and across processes.
#include "meshlayout/ops/moe_dispatch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/elementwise_test_util.h"
#include "meshlayout/ops/moe.h"

namespace meshlayout {
namespace {

using testing::distribute_on;

constexpr int64_t kExperts = 8, kD = 8, kF = 6, kTopK = 2;
const Shape kTokens{4, 3, kD};

struct Host {
  HostTensor x, logits, gate, up, down, dy;
};

Host random_host(DType dtype, uint64_t seed) {
  return {HostTensor::random(dtype, kTokens, seed),
          HostTensor::random(dtype, {4, 3, kExperts}, seed + 1),
          HostTensor::random(dtype, {kExperts, kD, kF}, seed + 2),
          HostTensor::random(dtype, {kExperts, kD, kF}, seed + 3),
          HostTensor::random(dtype, {kExperts, kF, kD}, seed + 4),
          HostTensor::random(dtype, kTokens, seed + 5)};
}

struct Placement {
  const char *x, *gate, *down;
};

// y, dx, dweights, dgate, dup, ddown of one placement, gathered.
std::vector<HostTensor> run(const std::shared_ptr<Runtime>& rt, const DeviceMesh& mesh,
                            const Host& h, const Placement& p, MoeDispatch dispatch) {
  const ExpertRouting r = route_experts(distribute_on(rt, h.logits, "None,None,None", mesh), kTopK,
                                        /*normalize=*/true);
  const Array x = distribute_on(rt, h.x, p.x, mesh);
  const Array gate = distribute_on(rt, h.gate, p.gate, mesh);
  const Array up = distribute_on(rt, h.up, p.gate, mesh);
  const Array down = distribute_on(rt, h.down, p.down, mesh);
  const Array y =
      expert_mixture(x, r.ids, r.weights, gate, up, down, GateFunction::kSilu, dispatch);
  EXPECT_EQ(y.layout(), x.layout());
  const ExpertMixtureGrads g =
      expert_mixture_backward(x, r.ids, r.weights, gate, up, down,
                              distribute_on(rt, h.dy, p.x, mesh), GateFunction::kSilu, dispatch);
  return {y.gather(),       g.dx.gather(),  g.dweights.gather(),
          g.dgate.gather(), g.dup.gather(), g.ddown.gather()};
}

const char* const kNames[] = {"y", "dx", "dweights", "dgate", "dup", "ddown"};

void expect_near(const std::vector<HostTensor>& got, const std::vector<HostTensor>& want,
                 double tolerance) {
  for (size_t t = 0; t < want.size(); ++t) {
    ASSERT_EQ(got[t].shape(), want[t].shape()) << kNames[t];
    for (int64_t i = 0; i < want[t].num_elements(); ++i) {
      ASSERT_NEAR(got[t].data_as<double>()[i], want[t].data_as<double>()[i], tolerance)
          << kNames[t] << " " << i;
    }
  }
}

// Tokens split over the axes that split the experts (or F): the dispatch moves rows. Includes
// a token dimension of 4 over a 4-way axis with 3 and an uneven block, experts over both axes,
// and F split over the tokens' axis.
const Placement kDispatched[] = {
    {"data,None,None", "data,None,None", "data,None,None"},
    {"model,None,None", "model,None,None", "model,None,None"},
    {"data,model,None", "model,None,None", "model,None,None"},
    {"data,model,None", "data,None,model", "data,model,None"},
    {"None,model,None", "data,None,model", "data,model,None"},
    {"data,None,model", "data,None,None", "data,None,None"},
    {"model,data,None", "(model,data),None,None", "(model,data),None,None"},
};

class MoeDispatchTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  DeviceMesh mesh_ = DeviceMesh({2, 4}, {"data", "model"});
};

// With F whole, every row's sum has at most top_k non-zero terms: the two dispatchers agree bit
// for bit, forward and backward; with F split they agree to rounding.
TEST_F(MoeDispatchTest, AllToAllEqualsAllGather) {
  const Host h = random_host(DType::kF64, 7);
  for (const Placement& p : kDispatched) {
    SCOPED_TRACE(fmt::format("x {} gate {}", p.x, p.gate));
    const auto a2a = run(rt_, mesh_, h, p, MoeDispatch::kAllToAll);
    const auto gathered = run(rt_, mesh_, h, p, MoeDispatch::kAllGather);
    const bool f_split =
        std::string(p.gate).ends_with("model") || std::string(p.gate).ends_with("data");
    if (f_split) {
      expect_near(a2a, gathered, 1e-13);
    } else {
      for (size_t t = 0; t < a2a.size(); ++t) EXPECT_EQ(a2a[t], gathered[t]) << kNames[t];
    }
  }
}

TEST_F(MoeDispatchTest, AllToAllEqualsReplicatedExperts) {
  const Host h = random_host(DType::kF64, 11);
  const auto replicated = run(rt_, mesh_, h, {"None,None,None", "None,None,None", "None,None,None"},
                              MoeDispatch::kAllToAll);
  for (const Placement& p : kDispatched) {
    SCOPED_TRACE(fmt::format("x {} gate {}", p.x, p.gate));
    expect_near(run(rt_, mesh_, h, p, MoeDispatch::kAllToAll), replicated, 1e-12);
  }
}

// Two and four processes of the 2×4 mesh: rows cross processes over "data" (2 processes) or
// both axes (4), in one message per pair of processes each way.
TEST_F(MoeDispatchTest, AcrossProcessesEqualsOneProcess) {
  const Host h = random_host(DType::kF64, 13);
  std::vector<std::vector<HostTensor>> want;
  for (const Placement& p : kDispatched) {
    want.push_back(run(rt_, mesh_, h, p, MoeDispatch::kAllGather));
  }
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes", procs));
    testing::run_as_processes(
        procs, 8 / procs,
        [&](std::shared_ptr<Runtime> rt) {
          for (size_t i = 0; i < std::size(kDispatched); ++i) {
            expect_near(run(rt, mesh_, h, kDispatched[i], MoeDispatch::kAllToAll), want[i], 1e-13);
          }
        },
        /*pool_threads=*/2);
  }
}

// F32: the dispatched sum is the replicated experts' bits (top-2, F whole).
TEST_F(MoeDispatchTest, AllToAllIsBitIdenticalToReplicatedInF32) {
  const Host h = random_host(DType::kF32, 17);
  const Placement replicated{"data,None,None", "None,None,None", "None,None,None"};
  const auto want = run(rt_, mesh_, h, replicated, MoeDispatch::kAllToAll);
  for (const Placement& p : {kDispatched[0], kDispatched[1], kDispatched[2], kDispatched[6]}) {
    SCOPED_TRACE(fmt::format("x {} gate {}", p.x, p.gate));
    EXPECT_EQ(run(rt_, mesh_, h, p, MoeDispatch::kAllToAll)[0], want[0]);
  }
}

}  // namespace
}  // namespace meshlayout
