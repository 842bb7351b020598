// gpu_array_test.cc — arrays on GPU devices (gpu:K, runtime/cuda/): distribute_tensor from the
// host, gather, and resharding between layouts of a 2×4 mesh of virtual GPU devices
// (MESHLAYOUT_GPU_DEVICES=8 over the physical GPUs), bit-exact, with the bytes moved equal to
// the minimum and no staging; out of GPU memory and mismatched kinds as clear errors. Without a
// GPU the GPU tests are skipped (reported as skipped); the refusals run everywhere.
#include <gtest/gtest.h>

#include <cstdlib>

#include "meshlayout/array/array.h"
#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class GpuArrayTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv(kGpuDevicesEnvVar, "8", 1); }
  void TearDown() override { unsetenv(kGpuDevicesEnvVar); }
};

std::vector<std::string> gpus(int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(device_name(i, DeviceKind::kCuda));
  return names;
}

TEST_F(GpuArrayTest, WithoutAGpuArraysOnGpuDevicesAreRefusedByName) {
  if (physical_gpu_count() > 0) GTEST_SKIP() << "this process has a GPU";
  const DeviceMesh mesh({2, 4}, {"data", "model"}, gpus(8));
  const TensorLayout layout({"data", "model"}, mesh);
  try {
    (void)Array::allocate(layout, {4, 8}, DType::kF32);
    ADD_FAILURE() << "allocated GPU shards without a GPU";
  } catch (const FailedPreconditionError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("gpu:0") != std::string::npos) << what;
    EXPECT_TRUE(what.find("CUDA") != std::string::npos) << what;
  }
}

TEST_F(GpuArrayTest, AGpuMeshNeedsTheGpuRuntime) {
  const DeviceMesh mesh({2, 4}, {"data", "model"}, gpus(8));
  const TensorLayout layout({"data", "model"}, mesh);
  auto cpu = Runtime::single_process(8);
  try {
    (void)Array::allocate(layout, {4, 8}, DType::kF32, cpu);
    ADD_FAILURE() << "a CPU runtime took a mesh of GPU devices";
  } catch (const ValueError& e) {
    EXPECT_TRUE(std::string(e.what()).find("is made of gpu devices, but the runtime's devices "
                                           "are cpu devices") != std::string::npos)
        << e.what();
  }
}

TEST_F(GpuArrayTest, PropertyDistributeGatherAndReshardAreBitExactOnA2x4Mesh) {
  MESHLAYOUT_REQUIRE_GPU();
  const uint64_t seed = testing::test_seed(20261127);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  auto rt = default_runtime(DeviceKind::kCuda);
  ASSERT_EQ(rt->device_kind(), DeviceKind::kCuda);
  ASSERT_EQ(rt->global_device_count(), 8);
  testing::check_random_reshards(rt, seed, 150);
}

TEST_F(GpuArrayTest, MegatronLayoutsReshardBitExactAndChargeEachDevice) {
  MESHLAYOUT_REQUIRE_GPU();
  const DeviceMesh mesh({2, 4}, {"data", "model"}, gpus(8));
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
    const HostTensor x = HostTensor::random(dtype, {1030, 515}, 7);
    const TensorLayout rows({"model", std::nullopt}, mesh), cols({std::nullopt, "model"}, mesh),
        both({"data", "model"}, mesh), replicated({std::nullopt, std::nullopt}, mesh);
    Array a = distribute_tensor(x, rows, {.strict = false});
    testing::expect_shards_match(a, x);
    EXPECT_EQ(a.runtime().device_kind(), DeviceKind::kCuda);
    for (const TensorLayout* to : {&cols, &both, &replicated, &rows}) {
      ReshardPlan plan;
      Array b = distribute_tensor(a, *to, {.strict = false, .plan_out = &plan});
      EXPECT_EQ(plan.bytes_moved, plan.minimum_bytes) << to->to_string();
      testing::expect_shards_match(b, x);
      EXPECT_EQ(b.gather(), x) << to->to_string();
      a = std::move(b);
    }
    // Each gpu:K's account holds its shard's bytes (GPU memory).
    for (const Array::Shard& s : a.local_shards()) {
      EXPECT_GE(a.runtime().device(s.device_id).memory().stats().bytes_live,
                static_cast<int64_t>(s.buffer.size()));
    }
  }
}

TEST_F(GpuArrayTest, OutOfGpuMemoryNamesTheDeviceTheBytesAndWhatIsFree) {
  MESHLAYOUT_REQUIRE_GPU();
  const DeviceMesh mesh({1}, {"model"}, gpus(1));
  const TensorLayout layout({std::nullopt}, mesh);
  try {
    (void)Array::allocate(layout, {int64_t{1} << 40}, DType::kF32);  // 4 TiB
    ADD_FAILURE() << "allocated 4 TiB on one GPU";
  } catch (const ResourceExhaustedError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("gpu:0") != std::string::npos) << what;
    EXPECT_TRUE(what.find("4398046511104 bytes") != std::string::npos) << what;
    EXPECT_TRUE(what.find("free of") != std::string::npos) << what;
  }
  // The device is still usable afterwards.
  const HostTensor x = HostTensor::random(DType::kF32, {64}, 3);
  EXPECT_EQ(distribute_tensor(x, layout).gather(), x);
}

}  // namespace
}  // namespace meshlayout
