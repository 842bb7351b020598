// mpi_gtest_main.cc — the main() of every test binary run under mpirun (test-only).
//
// Initialises MPI and meshlayout's runtime (initialize(): default_runtime() spans every
// process), runs the same tests in the same order on every rank, prints the full report on
// rank 0 and only failures, tagged [rank N], elsewhere, and exits non-zero if any test failed
// on any rank.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <ctime>
#include <iostream>
#include <string>

#include "meshlayout/runtime/mpi/initialize.h"

namespace meshlayout {
namespace {

/// On ranks other than 0: prints only failures, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  // (UnitTest::current_test_info() would deadlock inside OnTestPartResult: remember the name.)
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = fmt::format("{}.{}", test.test_suite_name(), test.name());
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::cerr << fmt::format("[rank {}] FAILED {} at {}:{}\n{}", rank_, test_,
                             result.file_name() ? result.file_name() : "?", result.line_number(),
                             result.message())
              << std::endl;
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace
}  // namespace meshlayout

#include "meshlayout/runtime/mpi/mpi_sanitizer_defaults.h"

int main(int argc, char** argv) {
  auto runtime = meshlayout::initialize(&argc, &argv);
  meshlayout::MpiContext mpi = meshlayout::initialize_mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Every rank must run the same tests in the same order: with --gtest_shuffle, all use rank
  // 0's seed (gtest would otherwise seed each rank from its own clock).
  int seed = GTEST_FLAG_GET(random_seed);
  if (seed == 0) seed = static_cast<int>(std::time(nullptr) % 99999) + 1;
  MPI_Bcast(&seed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  GTEST_FLAG_SET(random_seed, seed);
  if (mpi.process_id != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    delete listeners.Release(listeners.default_xml_generator());
    listeners.Append(new meshlayout::FailurePrinter(mpi.process_id));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi.process_id == 0 && failed) {
    std::cerr << argv[0] << ": a test failed on at least one of " << mpi.num_processes
              << " ranks (see [rank N] lines above for ranks other than 0)" << std::endl;
  }
  mpi = {};
  runtime.reset();
  meshlayout::set_default_runtime(nullptr);
  meshlayout::finalize_mpi();
  return failed;
}
