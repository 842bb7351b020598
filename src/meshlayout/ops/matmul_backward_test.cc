// The Dense backward (matmul_backward.h) in one process and as 2 and 4 threads-as-processes:
// every check of matmul_backward_test_util.h.
#include "meshlayout/ops/matmul_backward.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <thread>

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
    std::vector<std::unique_ptr<Communicator>> comms = make_in_process_group(procs);
    std::vector<std::thread> workers;
    std::vector<std::string> failures(static_cast<size_t>(procs));
    for (int p = 0; p < procs; ++p) {
      auto rt = std::make_shared<Runtime>(std::shared_ptr<Communicator>(std::move(comms[static_cast<size_t>(p)])),
                                          8 / procs, std::make_shared<ThreadPool>(2));
      workers.emplace_back([rt, &failures, p, seed] {
        try {
          testing::run_all_dense_backward_cases(rt, seed);
        } catch (const std::exception& e) {
          failures[static_cast<size_t>(p)] = e.what();
        }
      });
    }
    for (std::thread& t : workers) t.join();
    for (const std::string& f : failures) EXPECT_EQ(f, "");
  }
}

}  // namespace
}  // namespace meshlayout
