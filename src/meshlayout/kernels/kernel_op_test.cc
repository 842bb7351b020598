// KernelOp (kernel_op.h): an op runs the implementation of the kind it is called for; a kind
// without one is a NotFoundError naming the op and the kind; define() adds a kind. The kinds
// of devices and arrays (device_kind.h).
#include "meshlayout/kernels/kernel_op.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

int twice_on_cpu(int x) { return 2 * x; }
int thrice_on_cuda(int x) { return 3 * x; }

KernelOp<int(int)> scale_op{"scale_for_test", &twice_on_cpu};

TEST(KernelOpTest, RunsTheImplementationOfTheKindItIsCalledFor) {
  EXPECT_EQ(scale_op(DeviceKind::kCpu, 21), 42);
  EXPECT_TRUE(scale_op.defined(DeviceKind::kCpu));
  EXPECT_FALSE(scale_op.defined(DeviceKind::kCuda));
  try {
    (void)scale_op(DeviceKind::kCuda, 1);
    ADD_FAILURE() << "ran without a cuda implementation";
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kernel 'scale_for_test' has no gpu implementation"));
  }
  scale_op.define(DeviceKind::kCuda, &thrice_on_cuda);
  EXPECT_EQ(scale_op(DeviceKind::kCuda, 2), 6);
  EXPECT_EQ(scale_op(DeviceKind::kCpu, 2), 4);
  EXPECT_EQ(scale_op.name(), "scale_for_test");
}

TEST(KernelOpTest, DeviceKindsComeFromDeviceNames) {
  EXPECT_EQ(device_kind_of("cpu:3"), DeviceKind::kCpu);
  EXPECT_EQ(device_kind_of("cuda:0"), DeviceKind::kCuda);
  EXPECT_EQ(device_kind_name(DeviceKind::kCuda), "gpu");
  try {
    (void)device_kind_of("tpu:0");
    ADD_FAILURE() << "took tpu:0";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'tpu:0'"));
  }
  const DeviceMesh mesh({1}, {"x"}, std::vector<std::string>{"cpu:0"});
  const Array a = Array::allocate(TensorLayout::replicated(1, mesh), {4}, DType::kF32);
  EXPECT_EQ(kind_of(a), DeviceKind::kCpu);
}

}  // namespace
}  // namespace meshlayout
