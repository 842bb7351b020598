// add / multiply / concatenate under a real mpirun (np 2 and 4): operands resharded across
// processes, every check of elementwise_test_util.h on every rank. main() is mpi_gtest_main.cc's.
#include <gtest/gtest.h>

#include "meshlayout/ops/elementwise_test_util.h"

namespace meshlayout {
namespace {

TEST(ElementwiseMpiTest, EveryLayoutPairGivesTheHostResultBitForBit) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  EXPECT_NO_THROW(testing::run_all_elementwise_cases(rt, 9101));
}

}  // namespace
}  // namespace meshlayout
