#include "meshlayout/layout/devices.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

class DevicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reset_device_count();
    unsetenv(kCpuDevicesEnvVar);
  }
  void TearDown() override {
    reset_device_count();
    unsetenv(kCpuDevicesEnvVar);
  }
};

TEST_F(DevicesTest, DefaultsToEightCpuDevices) {
  auto devices = list_devices();
  ASSERT_EQ(devices.size(), 8u);
  EXPECT_EQ(devices.front(), "cpu:0");
  EXPECT_EQ(devices.back(), "cpu:7");
}

TEST_F(DevicesTest, EnvironmentVariableSetsTheCount) {
  setenv(kCpuDevicesEnvVar, "3", 1);
  EXPECT_EQ(list_devices(), (std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"}));
}

TEST_F(DevicesTest, ApiWinsOverEnvironment) {
  setenv(kCpuDevicesEnvVar, "3", 1);
  set_device_count(5);
  EXPECT_EQ(device_count(), 5);
  reset_device_count();
  EXPECT_EQ(device_count(), 3);
}

TEST_F(DevicesTest, BadEnvironmentValueNamesTheVariable) {
  setenv(kCpuDevicesEnvVar, "many", 1);
  try {
    device_count();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "MESHLAYOUT_CPU_DEVICES='many' must be a whole number of devices from 1 to "
                 "1048576");
  }
  setenv(kCpuDevicesEnvVar, "0", 1);
  EXPECT_THROW(device_count(), ValueError);
  setenv(kCpuDevicesEnvVar, "99999999999", 1);  // grew memory for 37 s, then aborted
  EXPECT_THROW(device_count(), ValueError);
}

TEST_F(DevicesTest, GetDeviceCountIsTheKerasName) {
  set_device_count(6);
  EXPECT_EQ(get_device_count(), 6);
  EXPECT_EQ(get_device_count("cpu"), 6);
  EXPECT_THROW(get_device_count("tpu"), ValueError);
}

TEST_F(DevicesTest, RejectsNonPositiveCountAndUnknownType) {
  EXPECT_THROW(set_device_count(0), ValueError);
  try {
    list_devices("tpu");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown device type 'tpu'; meshlayout has devices of types 'cpu' and 'gpu'");
  }
}

TEST_F(DevicesTest, ListsGpuDevicesFromTheVariableOrThePhysicalGpus) {
  // Without the variable: one gpu:K per physical GPU (none without CUDA or a GPU, as Keras).
  unsetenv(kGpuDevicesEnvVar);
  EXPECT_EQ(get_device_count("gpu"), physical_gpu_count());
  setenv(kGpuDevicesEnvVar, "3", 1);
  EXPECT_EQ(list_devices("gpu"), (std::vector<std::string>{"gpu:0", "gpu:1", "gpu:2"}));
  EXPECT_EQ(list_devices("cuda"), list_devices("gpu"));
  setenv(kGpuDevicesEnvVar, "0", 1);
  try {
    list_devices("gpu");
    ADD_FAILURE() << "accepted MESHLAYOUT_GPU_DEVICES=0";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "MESHLAYOUT_GPU_DEVICES='0' must be a whole number of devices from 1 "
                 "to 1048576");
  }
  unsetenv(kGpuDevicesEnvVar);
  EXPECT_EQ(device_kind_of("gpu:3"), DeviceKind::kCuda);
  EXPECT_EQ(device_kind_of("cpu:3"), DeviceKind::kCpu);
  EXPECT_EQ(device_name(4, DeviceKind::kCuda), "gpu:4");
  EXPECT_THROW(device_kind_of("tpu:0"), ValueError);
}

TEST_F(DevicesTest, ParsesDeviceNames) {
  EXPECT_EQ(parse_device_name("cpu:12"), 12);
  EXPECT_EQ(parse_device_name("cpu:0"), 0);
  EXPECT_EQ(parse_device_name("cpu:01"), std::nullopt);
  EXPECT_EQ(parse_device_name("gpu:1"), 1);
  EXPECT_EQ(parse_device_name("gpu:01"), std::nullopt);
  EXPECT_EQ(parse_device_name("tpu:1"), std::nullopt);
  EXPECT_EQ(parse_device_name("cpu:"), std::nullopt);
  EXPECT_EQ(parse_device_name("cpu:-1"), std::nullopt);
}

}  // namespace
}  // namespace meshlayout
