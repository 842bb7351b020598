// array_limits_test.cc — arrays that cannot fit are refused before anything is allocated
// (machine memory, MESHLAYOUT_DEVICE_MEMORY), with the numbers; processes that are about to
// run different reshards fail together with one message instead of waiting for each other.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>

#include "meshlayout/array/array.h"
#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/memory_budget.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class ArrayLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override {
    reset_device_count();
    ::unsetenv(kDeviceMemoryEnvVar);
  }
  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  DeviceMesh mesh_{{2, 4}, {"data", "model"}};
};

int64_t live_bytes(Runtime& rt) {
  int64_t total = 0;
  for (VirtualDevice* d : rt.local_devices()) total += d->memory().stats().bytes_live;
  return total;
}

TEST_F(ArrayLimitsTest, MoreThanTheMachineHasIsRefusedWithTheNumbers) {
  // 10^12 x 10^3 F32 sharded 8 ways: 500 TB per device.
  try {
    Array::allocate(TensorLayout({"data", "model"}, mesh_), {1'000'000'000'000, 1000}, DType::kF32,
                    rt_);
    FAIL();
  } catch (const ResourceExhaustedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("array (1000000000000, 1000) F32 as layout[data,model]@mesh"));
    EXPECT_THAT(e.what(), HasSubstr("but this machine has"));
  }
  EXPECT_EQ(live_bytes(*rt_), 0);
  try {
    HostTensor t(DType::kF32, {1'000'000, 1'000'000});
    FAIL();
  } catch (const ResourceExhaustedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("host tensor (1000000, 1000000) F32 needs 3.6 TiB"));
  }
  // Elements that do not even fit in int64: a ValueError naming the shape, not length_error.
  EXPECT_THROW(HostTensor(DType::kF32, {INT64_MAX, 2}), ValueError);
}

TEST_F(ArrayLimitsTest, PerDeviceBudgetIsEnforcedBeforeAllocating) {
  ::setenv(kDeviceMemoryEnvVar, "1KiB", 1);
  Array small = Array::allocate(TensorLayout({"data", "model"}, mesh_), {16, 32}, DType::kF32, rt_);
  EXPECT_EQ(live_bytes(*rt_), 16 * 32 * 4);  // 256 B per device fits
  try {
    Array::allocate(TensorLayout({"data", None}, mesh_), {16, 64}, DType::kF32, rt_);  // 2 KiB each
    FAIL();
  } catch (const ResourceExhaustedError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("needs 2.0 KiB more on device cpu:0, which holds 256 B "
                          "already: over its budget of 1.0 KiB (MESHLAYOUT_DEVICE_MEMORY=1024)"));
  }
  EXPECT_EQ(live_bytes(*rt_), 16 * 32 * 4);  // nothing more was allocated
  ::setenv(kDeviceMemoryEnvVar, "lots", 1);
  EXPECT_THROW(Array::allocate(TensorLayout({"data", None}, mesh_), {4, 4}, DType::kF32, rt_),
               ValueError);
}

TEST_F(ArrayLimitsTest, ABudgetExceededOnOneProcessFailsEveryProcess) {
  ::setenv(kDeviceMemoryEnvVar, "1KiB", 1);
  std::vector<std::string> errors(4);
  testing::run_as_processes(4, 2, [&](std::shared_ptr<Runtime> rt) {
    DeviceMesh mesh({2, 4}, {"data", "model"});
    // Process 3's first device already holds 900 B; the new 256 B shards fit everywhere else.
    std::optional<DeviceBuffer> held;
    if (rt->process_id() == 3) held.emplace(rt->device(6).memory(), 900);
    try {
      allocate_agreed(TensorLayout({"data", "model"}, mesh), {16, 32}, DType::kF32, rt);
      errors[static_cast<size_t>(rt->process_id())] = "allocated";
    } catch (const ResourceExhaustedError& e) {
      errors[static_cast<size_t>(rt->process_id())] = e.what();
    }
    EXPECT_EQ(live_bytes(*rt), rt->process_id() == 3 ? 900 : 0);  // nothing left allocated
  });
  for (const std::string& e : errors) {
    EXPECT_THAT(e,
                HasSubstr("rank 3: array (16, 32) F32 as layout[data,model]@mesh[data=2,model=4] "
                          "needs 256 B more on device cpu:6, which holds 900 B already"));
  }
}

TEST_F(ArrayLimitsTest, ProcessesGivenDifferentTargetsFailTogether) {
  std::vector<std::string> errors(4);
  testing::run_as_processes(4, 2, [&](std::shared_ptr<Runtime> rt) {
    DeviceMesh mesh({2, 4}, {"data", "model"});
    HostTensor x = HostTensor::random(DType::kF32, {8, 8}, 1);
    Array a = distribute_tensor(x, TensorLayout({"data", None}, mesh), {.runtime = rt});
    const TensorLayout to = rt->process_id() == 2 ? TensorLayout({"model", None}, mesh)
                                                  : TensorLayout({None, "model"}, mesh);
    try {
      Array b = distribute_tensor(a, to);
    } catch (const ValueError& e) {
      errors[static_cast<size_t>(rt->process_id())] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_THAT(e, HasSubstr("processes disagree on reshard: process 2 has to=layout[model,None]"));
    EXPECT_THAT(e, HasSubstr("but process 0 has to=layout[None,model]"));
  }
}

}  // namespace
}  // namespace meshlayout
