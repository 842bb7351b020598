// The Dense backward under a real mpirun (np 2 and 4): dx's partial sums over 'model' and dw's
// over 'data' cross processes; every check of matmul_backward_test_util.h on every rank. The
// main() is mpi_gtest_main.cc's.
#include <gtest/gtest.h>

#include "meshlayout/ops/matmul_backward_test_util.h"

namespace meshlayout {
namespace {

TEST(MatmulBackwardMpiTest, EveryLayoutMatchesTheFormulasAndFiniteDifferences) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  EXPECT_NO_THROW(testing::run_all_dense_backward_cases(rt, 9601));
}

}  // namespace
}  // namespace meshlayout
