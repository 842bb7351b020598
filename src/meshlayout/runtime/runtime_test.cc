#include "meshlayout/runtime/runtime.h"

#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

TEST(RuntimeTest, SingleProcessOwnsEveryDevice) {
  auto rt = Runtime::single_process(8);
  EXPECT_EQ(rt->num_processes(), 1);
  EXPECT_EQ(rt->global_device_count(), 8);
  EXPECT_EQ(rt->local_devices().size(), 8u);
  EXPECT_EQ(rt->device(7).name(), "cpu:7");
  EXPECT_TRUE(rt->is_local(7));
}

TEST(RuntimeTest, ProcessesOwnContiguousDeviceRanges) {
  auto comms = make_in_process_group(2);
  Runtime r1(std::shared_ptr<Communicator>(std::move(comms[1])), 4);
  EXPECT_EQ(r1.process_id(), 1);
  EXPECT_EQ(r1.global_device_count(), 8);
  EXPECT_EQ(r1.local_devices().front()->name(), "cpu:4");
  EXPECT_EQ(r1.process_of(3), 0);
  try {
    r1.device(2);
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_STREQ(e.what(),
                 "cpu:2 is not a device of process 1 (it owns cpu:4 … cpu:7; cpu:2 belongs to "
                 "process 0)");
  }
}

TEST(RuntimeTest, DefaultRuntimeFollowsTheDeviceCount) {
  set_device_count(4);
  EXPECT_EQ(default_runtime()->global_device_count(), 4);
  EXPECT_EQ(process_id(), 0);
  EXPECT_EQ(num_processes(), 1);
  set_device_count(6);
  EXPECT_EQ(default_runtime()->global_device_count(), 6);
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout
