// The Dense backward (matmul_backward.h) in one process and as 2 and 4 threads-as-processes:
// every check of matmul_backward_test_util.h.
#include "meshlayout/ops/matmul_backward.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/matmul_backward_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class MatmulBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(MatmulBackwardTest, EveryLayoutMatchesTheFormulasAndFiniteDifferencesInOneProcess) {
  const uint64_t seed = testing::test_seed(9501);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  EXPECT_NO_THROW(testing::run_all_dense_backward_cases(Runtime::single_process(8), seed));
}

TEST_F(MatmulBackwardTest, EveryLayoutMatchesAsTwoAndFourProcesses) {
  const uint64_t seed = testing::test_seed(9502);
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes, MESHLAYOUT_TEST_SEED={}", procs, seed));
    testing::run_as_processes(
        procs, 8 / procs,
        [seed](std::shared_ptr<Runtime> rt) { testing::run_all_dense_backward_cases(rt, seed); },
        /*pool_threads=*/2);
  }
}

}  // namespace
}  // namespace meshlayout
