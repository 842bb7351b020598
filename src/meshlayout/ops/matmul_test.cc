#include "meshlayout/ops/matmul.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <thread>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/matmul_test_util.h"
#include "meshlayout/ops/partial_sum.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class MatmulTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

// Runs `body(runtime of process p)` on `procs` threads, each a process of one in-process group
// with its own pool of `threads` threads.
void run_as_processes(int procs, size_t threads,
                      const std::function<void(std::shared_ptr<Runtime>)>& body) {
  testing::run_as_processes(procs, 8 / procs, body, threads);
}

TEST_F(MatmulTest, EveryRuleMatchesTheFloat64ReferenceInOneProcess) {
  auto rt = Runtime::single_process(8);
  const uint64_t seed = testing::test_seed(7001);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  EXPECT_NO_THROW(testing::run_all_matmul_cases(rt, seed));
}

TEST_F(MatmulTest, EveryRuleMatchesTheFloat64ReferenceWithOnePoolThread) {
  auto rt =
      std::make_shared<Runtime>(std::shared_ptr<Communicator>(make_single_process_communicator()),
                                8, std::make_shared<ThreadPool>(1));
  EXPECT_NO_THROW(testing::run_all_matmul_cases(rt, testing::test_seed(7002)));
}

TEST_F(MatmulTest, EveryRuleMatchesTheFloat64ReferenceAsTwoAndFourProcesses) {
  const uint64_t seed = testing::test_seed(7003);
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes, MESHLAYOUT_TEST_SEED={}", procs, seed));
    run_as_processes(procs, 2,
                     [&](std::shared_ptr<Runtime> rt) { testing::run_all_matmul_cases(rt, seed); });
  }
}

TEST_F(MatmulTest, AllReduceOverFourProcessesRunsInTwoStepsAndReplicasAgreeBitForBit) {
  run_as_processes(4, 2, [&](std::shared_ptr<Runtime> rt) {
    testing::MatmulCase c{"row",
                          "mesh[x=8]",
                          {9, 21},
                          {21, 6},
                          "None,x",
                          "x,None",
                          "",
                          "layout[None,None]",
                          MatmulReduction::kAllReduce};
    MatmulPlan plan = testing::run_matmul_case(rt, c, DType::kF32, 11);
    if (!plan.all_reduce_in_two_steps) throw InternalError("expected two steps");
    if (testing::bare_layout(plan.scatter_layout) != "layout[x,None]") {
      throw InternalError("scatter layout " + plan.scatter_layout.to_string());
    }
  });
  // Two processes: the direct sum, each process adding the other's in process order.
  run_as_processes(2, 2, [&](std::shared_ptr<Runtime> rt) {
    DeviceMesh mesh({8}, {"x"});
    Array x = distribute_tensor(HostTensor::random(DType::kF32, {9, 21}, 3),
                                TensorLayout({None, "x"}, mesh), {.runtime = rt});
    Array w = distribute_tensor(HostTensor::random(DType::kF32, {21, 6}, 4),
                                TensorLayout({"x", None}, mesh), {.runtime = rt});
    MatmulPlan plan;
    Array y = matmul(x, w, {.plan_out = &plan});
    if (plan.all_reduce_in_two_steps) throw InternalError("expected the direct sum");
    testing::expect_shards_match(y, y.gather());  // every replica, bit for bit
  });
}

TEST_F(MatmulTest, ReplicasOfAnAllReduceAgreeBitForBitInOneProcess) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Array x = distribute_tensor(HostTensor::random(DType::kF32, {10, 37}, 5),
                              TensorLayout({"data", "model"}, mesh), {.runtime = rt});
  Array w = distribute_tensor(HostTensor::random(DType::kF32, {37, 9}, 6),
                              TensorLayout({"model", None}, mesh), {.runtime = rt});
  Array y = matmul(x, w);
  EXPECT_EQ(y.layout(), TensorLayout({"data", None}, mesh));
  testing::expect_shards_match(y, y.gather());
}

TEST_F(MatmulTest, DevicesHoldOnlyTheirShardsOnceDone) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Array x = distribute_tensor(HostTensor::random(DType::kF32, {16, 32}, 7),
                              TensorLayout({"data", "model"}, mesh), {.runtime = rt});
  Array w = distribute_tensor(HostTensor::random(DType::kF32, {32, 8}, 8),
                              TensorLayout({"model", None}, mesh), {.runtime = rt});
  Array y = matmul(x, w);
  for (VirtualDevice* d : rt->local_devices()) {
    const int64_t p = *mesh.position_of_device(d->id());
    const int64_t held = static_cast<int64_t>(
        x.shard_at(p)->buffer.size() + w.shard_at(p)->buffer.size() + y.shard_at(p)->buffer.size());
    EXPECT_EQ(d->memory().stats().bytes_live, held) << d->name();
    // The partial product (8 x 8 floats) was the only extra block.
    EXPECT_LE(d->memory().stats().peak_bytes, held + 8 * 8 * 4) << d->name();
  }
  EXPECT_EQ(rt->staging().stats().bytes_live, 0);
}

TEST_F(MatmulTest, RandomMeshesAndLayoutsMatchTheReference) {
  const uint64_t seed = testing::test_seed(7004);
  RecordProperty("seed", std::to_string(seed));
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  auto rt = Runtime::single_process(8);
  testing::Random r(seed);
  static const std::vector<int64_t> extents{1, 2, 3, 5, 8, 9, 16};
  for (int i = 0; i < 120; ++i) {
    DeviceMesh mesh = testing::random_mesh(r, 8, r.uniform(2) == 0);
    Shape xs;
    const int rank = 2 + static_cast<int>(r.uniform(2));
    for (int d = 0; d < rank; ++d) xs.push_back(r.pick(extents));
    Shape ws{xs.back(), r.pick(extents)};
    const TensorLayout xl = testing::random_layout(r, mesh, xs.size());
    const TensorLayout wl = testing::random_layout(r, mesh, 2);
    std::optional<TensorLayout> out;
    if (r.uniform(3) == 0) out = testing::random_layout(r, mesh, xs.size());
    SCOPED_TRACE(fmt::format("case {}: x {} {} @ w {} {} -> {}", i, shape_to_string(xs),
                             xl.to_string(), shape_to_string(ws), wl.to_string(),
                             out ? out->to_string() : "default"));
    // Random layouts may or may not need a reshard: the result is checked, not the route.
    const HostTensor xh = HostTensor::random(DType::kF32, xs, seed + static_cast<uint64_t>(i));
    const HostTensor wh =
        HostTensor::random(DType::kF32, ws, seed + 1000 + static_cast<uint64_t>(i));
    Array x = distribute_tensor(xh, xl, {.runtime = rt});
    Array w = distribute_tensor(wh, wl, {.runtime = rt});
    MatmulPlan plan;
    MatmulOptions options{.plan_out = &plan};
    options.output_layout = out;
    Array y = matmul(x, w, options);
    SCOPED_TRACE(plan.to_string());
    ASSERT_EQ(y.layout(), plan.output_layout);
    ASSERT_NO_THROW(testing::expect_matches_reference(y, y.gather(),
                                                      testing::reference_matmul(xh, wh), "random"));
  }
}

TEST_F(MatmulTest, ReductionWithEveryKBlockEmptyWritesZeros) {
  // No summands at all (every K block empty) means zeros, whatever the target held before.
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({8}, {"x"});
  internal_ops::PartialLayout layout{
      ShardGeometry(TensorLayout({None, None}, mesh), {5, 3}), {0}, 0};
  Array out = Array::allocate(TensorLayout({"x", None}, mesh), {5, 3}, DType::kF32, rt);
  for (Array::Shard& s : out.local_shards())
    std::fill_n(reinterpret_cast<float*>(s.buffer.data()), s.box.num_elements(), 7.0f);
  internal_ops::ReductionPlan plan = internal_ops::plan_reduction(layout, out.geometry(), 4, 8);
  internal_ops::reduce_partials({}, plan, out);
  EXPECT_EQ(out.gather(), HostTensor(DType::kF32, {5, 3}));
}

// --- errors, all on replicated metadata before any communication ---

using testing::ValueErrorMessage;

TEST_F(MatmulTest, RejectsBadOperandsWithExactMessages) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  DeviceMesh flat({8}, {"x"});
  auto arr = [&](Shape s, DType dt, const DeviceMesh& m) {
    return distribute_tensor(HostTensor::random(dt, s, 1),
                             TensorLayout::replicated(static_cast<int>(s.size()), m),
                             {.runtime = rt});
  };
  Array x86 = arr({8, 6}, DType::kF32, mesh);
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(x86, arr({5, 4}, DType::kF32, mesh));
            }),
            "matmul: contracted dimensions differ: x has shape (8, 6) (K = 6) but w has shape "
            "(5, 4) (K = 5)");
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(arr({6}, DType::kF32, mesh), arr({6, 4}, DType::kF32, mesh));
            }),
            "matmul: x must have rank >= 2 (..., K); got shape (6,)");
  EXPECT_EQ(ValueErrorMessage([&] { matmul(x86, arr({6}, DType::kF32, mesh)); }),
            "matmul: w must have rank 2 (K, N); got shape (6,)");
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(x86, arr({6, 4, 2}, DType::kF32, mesh));
            }),
            "matmul: w must have rank 2 (K, N); got shape (6, 4, 2)");
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(x86, arr({6, 4}, DType::kF64, mesh));
            }),
            "matmul: x is F32 but w is F64; both operands must have the same dtype (convert one "
            "first)");
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(arr({8, 6}, DType::kBF16, mesh), arr({6, 4}, DType::kBF16, mesh));
            }),
            "matmul: dtype BF16 is not supported; supported: F32, F64");
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(x86, arr({6, 4}, DType::kF32, flat));
            }),
            "matmul: x is on mesh[data=2,model=4] but w is on mesh[x=8]; both operands must be on "
            "the same mesh");
  auto other_rt = Runtime::single_process(8);
  Array w_other = distribute_tensor(HostTensor::random(DType::kF32, {6, 4}, 2),
                                    TensorLayout::replicated(2, mesh), {.runtime = other_rt});
  EXPECT_EQ(ValueErrorMessage([&] { matmul(x86, w_other); }),
            "matmul: x and w belong to different runtimes; both operands must live in the same "
            "runtime");
  Array w64 = arr({6, 4}, DType::kF32, mesh);
  EXPECT_EQ(ValueErrorMessage([&] { matmul(x86, w64, {.output_layout = TensorLayout({None})}); }),
            "matmul: output_layout layout[None] has 1 dimension but the output has shape (8, 4)");
  EXPECT_EQ(ValueErrorMessage([&] {
              matmul(x86, w64, {.output_layout = TensorLayout({"x", None}, flat)});
            }),
            "matmul: output_layout is on mesh[x=8] but the operands are on mesh[data=2,model=4]");
}

TEST_F(MatmulTest, BadOperandsFailOnEveryProcessAlike) {
  std::vector<std::string> messages(4);
  run_as_processes(4, 1, [&](std::shared_ptr<Runtime> rt) {
    DeviceMesh mesh({2, 4}, {"data", "model"});
    Array x = distribute_tensor(HostTensor::random(DType::kF32, {8, 6}, 1),
                                TensorLayout({"data", "model"}, mesh), {.runtime = rt});
    Array w = distribute_tensor(HostTensor::random(DType::kF32, {5, 4}, 2),
                                TensorLayout({"model", None}, mesh), {.runtime = rt});
    messages[static_cast<size_t>(rt->process_id())] = ValueErrorMessage([&] { matmul(x, w); });
    Array w2 = distribute_tensor(HostTensor::random(DType::kF32, {6, 4}, 2),
                                 TensorLayout({"model", None}, mesh), {.runtime = rt});
    matmul(x, w2);  // the group is still usable
  });
  for (const std::string& m : messages) {
    EXPECT_EQ(m,
              "matmul: contracted dimensions differ: x has shape (8, 6) (K = 6) but w has "
              "shape (5, 4) (K = 5)");
  }
}

}  // namespace
}  // namespace meshlayout
