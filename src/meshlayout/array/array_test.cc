#include "meshlayout/array/array.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using testing::Random;

class ArrayTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(ArrayTest, DistributeGivesEachDeviceItsBox) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor x = HostTensor::random(DType::kF32, {8, 6}, 1);
  Array a = distribute_tensor(x, TensorLayout({"data", None}, mesh), {.runtime = rt});
  ASSERT_EQ(a.local_shards().size(), 8u);
  EXPECT_EQ(a.shard_at(5)->box.to_string(), "[4:8, 0:6]");
  EXPECT_EQ(rt->device(5).memory().stats().bytes_live, 4 * 6 * 4);
  testing::expect_shards_match(a, x);
  EXPECT_EQ(a.gather(), x);
}

TEST_F(ArrayTest, RowsToColumnsMovesOnlyWhatIsMissing) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({8}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {16, 16}, 2);
  Array rows = distribute_tensor(x, TensorLayout({"x", None}, mesh), {.runtime = rt});
  ReshardPlan plan;
  Array cols = distribute_tensor(rows, TensorLayout({None, "x"}, mesh), {.plan_out = &plan});
  EXPECT_EQ(plan.pattern, "all-to-all");
  EXPECT_EQ(plan.bytes_kept, 8 * (2 * 2 * 4));  // each device keeps its 2x2 diagonal block
  EXPECT_EQ(plan.bytes_moved, 16 * 16 * 4 - plan.bytes_kept);
  EXPECT_EQ(plan.bytes_moved, plan.minimum_bytes);
  testing::expect_shards_match(cols, x);
}

TEST_F(ArrayTest, ShardedToReplicatedIsAnAllGather) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({8}, {"x"});
  HostTensor x = HostTensor::random(DType::kI32, {16}, 3);
  Array a = distribute_tensor(x, TensorLayout({"x"}, mesh), {.runtime = rt});
  ReshardPlan plan = plan_distribute(a, TensorLayout({None}));
  EXPECT_EQ(plan.pattern, "all-gather");
  EXPECT_EQ(plan.bytes_moved, 8 * 14 * 4);
  EXPECT_THAT(plan.summary(), HasSubstr("plan: all-gather (64 transfers); moves 448 B (448 bytes), "
                                        "minimum possible 448 B (448 bytes)"));
}

TEST_F(ArrayTest, ReplicatedToShardedMovesNothing) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor x = HostTensor::random(DType::kF32, {8, 8}, 4);
  Array a = distribute_tensor(x, TensorLayout({None, None}, mesh), {.runtime = rt});
  ReshardPlan plan = plan_distribute(a, TensorLayout({"data", "model"}));
  EXPECT_EQ(plan.pattern, "local slice");
  EXPECT_EQ(plan.bytes_moved, 0);
}

TEST_F(ArrayTest, ReshardNeverHoldsMoreThanSourceAndTargetShards) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor x = HostTensor::random(DType::kF32, {64, 64}, 5);
  Array a = distribute_tensor(x, TensorLayout({"data", None}, mesh), {.runtime = rt});
  std::vector<int64_t> before;
  for (VirtualDevice* d : rt->local_devices()) {
    before.push_back(d->memory().stats().bytes_live);
    d->memory().reset_peak();
  }
  Array b = distribute_tensor(a, TensorLayout({None, "model"}, mesh));
  for (VirtualDevice* d : rt->local_devices()) {
    const int64_t target =
        static_cast<int64_t>(b.shard_at(*mesh.position_of_device(d->id()))->buffer.size());
    EXPECT_EQ(d->memory().stats().peak_bytes, before[static_cast<size_t>(d->id())] + target)
        << d->name();
  }
  EXPECT_EQ(rt->staging().stats().peak_bytes, 0);
}

TEST_F(ArrayTest, RefusesMismatchedMeshesWrongRankDtypeAndUnknownDevices) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh8({8}, {"x"});
  DeviceMesh mesh4({4}, {"x"}, std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2", "cpu:3"});
  HostTensor x = HostTensor::random(DType::kF32, {8, 8}, 6);
  Array a = distribute_tensor(x, TensorLayout({"x", None}, mesh8), {.runtime = rt});
  try {
    distribute_tensor(a, TensorLayout({"x", None}, mesh4));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Mismatched meshes: cannot reshard from mesh[x=8] to mesh[x=4]: they must span "
                 "the same devices; only the source has ['cpu:4', 'cpu:5', 'cpu:6', 'cpu:7'], "
                 "only the target has []");
  }
  try {
    distribute_tensor(a, TensorLayout({"x"}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "tensor with shape (8, 8) does not fit layout[x]@mesh[x=8]: the layout has 1 "
                 "dimension, the tensor has 2");
  }
  Array other = Array::allocate(TensorLayout({None, "x"}, mesh8), {8, 8}, DType::kBF16, rt);
  try {
    reshard_into(a, other);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot reshard a F32 tensor of shape (8, 8) into a BF16 array: the dtypes differ "
                 "(convert explicitly first)");
  }
  set_device_count(16);
  DeviceMesh mesh16({16}, {"x"});
  try {
    distribute_tensor(x, TensorLayout({"x", None}, mesh16), {.runtime = rt});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "mesh[x=16] uses cpu:8, but the runtime has 8 devices (cpu:0 … cpu:7); build the "
                 "mesh from list_devices()");
  }
}

TEST_F(ArrayTest, PropertyDistributeGatherAndReshardRoundTripsInOneProcess) {
  const uint64_t seed = testing::test_seed(20261122);
  RecordProperty("seed", std::to_string(seed));
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  Random r(seed);
  auto rt = Runtime::single_process(8);
  for (int i = 0; i < 150; ++i) {
    testing::Case c = testing::random_case(r, 8);
    SCOPED_TRACE(fmt::format("case {}: {}", i, c.describe()));
    HostTensor x = HostTensor::random(c.dtype, c.shape, seed + static_cast<uint64_t>(i));
    Array a = distribute_tensor(x, c.a, {.runtime = rt});
    testing::expect_shards_match(a, x);
    ASSERT_EQ(a.gather(), x);
    ReshardPlan ab, ba;
    Array b = distribute_tensor(a, c.b, {.plan_out = &ab});
    testing::expect_shards_match(b, x);
    ASSERT_EQ(ab.bytes_moved, ab.minimum_bytes);
    const size_t elem = dtype_size(c.dtype);
    ASSERT_EQ(reshard_bytes_moved(a.geometry(), b.geometry(), elem), ab.bytes_moved);
    Array back = distribute_tensor(b, c.a, {.plan_out = &ba});
    ASSERT_EQ(ba.bytes_moved, ba.minimum_bytes);
    ASSERT_EQ(reshard_bytes_moved(b.geometry(), back.geometry(), elem), ba.bytes_moved);
    testing::expect_shards_match(back, x);
    ASSERT_EQ(back.gather(), x);
  }
}

TEST_F(ArrayTest, PropertyRoundTripsAsSeveralProcesses) {
  const uint64_t seed = testing::test_seed(20261123);
  RecordProperty("seed", std::to_string(seed));
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes, MESHLAYOUT_TEST_SEED={}", procs, seed));
    testing::run_as_processes(procs, 8 / procs, [&](std::shared_ptr<Runtime> rt) {
      testing::check_random_reshards(rt, seed, 40);
    });
  }
}

TEST_F(ArrayTest, InjectedFailureOnOneProcessFailsEveryProcessWithTheSameMessage) {
  std::vector<std::string> messages(4);
  testing::run_as_processes(4, 2, [&](std::shared_ptr<Runtime> rt) {
    DeviceMesh mesh({8}, {"x"});
    HostTensor x = HostTensor::random(DType::kF32, {16}, 9);
    Array a = distribute_tensor(x, TensorLayout({"x"}, mesh), {.runtime = rt});
    try {
      distribute_tensor(a, TensorLayout({None}), {.inject_failure_on_process = 2});
    } catch (const Error& e) {
      messages[static_cast<size_t>(rt->process_id())] = e.what();
    }
    // The group is still usable afterwards.
    Array b = distribute_tensor(a, TensorLayout({None}));
    if (!(b.gather() == x)) throw InternalError("group unusable after a failure");
  });
  for (const std::string& m : messages) {
    EXPECT_EQ(m,
              "rank 2: injected failure on process 2 before the reshard moved any data (testing)");
  }
}

}  // namespace
}  // namespace meshlayout
