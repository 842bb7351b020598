// Runs under `mpirun -np N` (ctest: N = 2 and 4) or alone as a singleton (N = 1). Every rank
// runs every test in the same order; only rank 0 prints the gtest report, other ranks print
// their failures, and the exit code is non-zero if any rank failed.
#include "meshlayout/runtime/mpi/mpi_communicator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/communicator_conformance.h"
#include "meshlayout/runtime/mpi/initialize.h"
#include "meshlayout/runtime/mpi/mpi_runtime.h"

namespace meshlayout {
namespace {

// ---- the conformance suite, on the direct path and on the split path

struct Config {
  const char* name;
  MpiCommunicatorOptions options;
};

// max_count 256 sends most of the suite's buffers down the split paths of
// NOTE [Large MPI transfers], with count checking on.
const Config kConfigs[] = {
    {"Direct", {}},
    {"Split", {.max_count = 256, .check_counts = true}},
};

class MpiConformanceTest : public ::testing::TestWithParam<std::tuple<conformance::Check, Config>> {
};

TEST_P(MpiConformanceTest, Passes) {
  const auto& [check, config] = GetParam();
  MpiCommunicator comm(MPI_COMM_WORLD, config.options);
  EXPECT_EQ(comm.backend(), "mpi");
  check.run(comm);
}

INSTANTIATE_TEST_SUITE_P(AllChecks, MpiConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(conformance::kChecks),
                                            ::testing::ValuesIn(kConfigs)),
                         [](const auto& info) {
                           return fmt::format("{}_{}", std::get<0>(info.param).name,
                                              std::get<1>(info.param).name);
                         });

TEST(MpiCommunicatorTest, WorldCommunicatorPassesTheWholeSuite) {
  conformance::run_communicator_conformance(mpi_world());
}

TEST(MpiCommunicatorTest, WorksOnASplitCommunicator) {
  // Even and odd world ranks form two groups; each runs the suite on its own.
  MPI_Comm half = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, mpi_process_id() % 2, 0, &half), MPI_SUCCESS);
  {
    MpiCommunicator comm(half);
    EXPECT_EQ(comm.size(), (mpi_num_processes() + 1 - mpi_process_id() % 2) / 2);
    EXPECT_EQ(comm.rank(), mpi_process_id() / 2);
    conformance::run_communicator_conformance(comm);
  }
  MPI_Comm_free(&half);
}

// ---- agreement on a failure

TEST(MpiAgreeOnFailureTest, InjectedFailureOnTheLastRankReachesEveryRank) {
  MpiCommunicator& comm = mpi_world();
  const int last = comm.size() - 1;
  std::exception_ptr err;
  try {
    if (comm.rank() == last)
      throw DataLossError(fmt::format("shard file of rank {} is truncated", last));
  } catch (...) {
    err = std::current_exception();
  }
  std::string message = "(returned)";
  try {
    agree_on_failure(comm, err);
  } catch (const DataLossError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, fmt::format("rank {}: shard file of rank {} is truncated", last, last));
  // Every rank saw the same text.
  std::vector<char> texts(static_cast<size_t>(comm.size()) * 128, '\0');
  char mine[128] = {};
  std::strncpy(mine, message.c_str(), sizeof mine - 1);
  comm.all_gather(mine, sizeof mine, texts.data());
  for (int r = 0; r < comm.size(); ++r) EXPECT_STREQ(texts.data() + 128 * r, mine) << "rank " << r;
}

TEST(MpiCommunicatorTest, CountCheckNamesTheMismatch) {
  if (mpi_num_processes() < 2) GTEST_SKIP() << "needs 2 processes";
  MpiCommunicator comm(MPI_COMM_WORLD, {.check_counts = true});
  const auto n = static_cast<size_t>(comm.size());
  const int last = comm.size() - 1;
  std::vector<size_t> send_counts(n, 0), recv_counts(n, 0), offsets(n, 0);
  if (comm.rank() == last) send_counts[0] = 3;
  if (comm.rank() == 0) recv_counts[static_cast<size_t>(last)] = 2;
  uint8_t send[3] = {1, 2, 3}, recv[3] = {};
  try {
    comm.all_to_all_v(send, send_counts, offsets, recv, recv_counts, offsets);
    ADD_FAILURE() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("rank 0: all_to_all_v: rank {} sends 3 bytes to rank 0 but rank 0 "
                          "expects 2 bytes from rank {}",
                          last, last));
  }
  comm.barrier();
}

// ---- initialize_mpi

TEST(InitializeMpiTest, ContextMatchesMpi) {
  MpiContext mpi = initialize_mpi(nullptr, nullptr);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(mpi.process_id, rank);
  EXPECT_EQ(mpi.num_processes, size);
  EXPECT_EQ(mpi_process_id(), rank);
  EXPECT_EQ(mpi_num_processes(), size);
  EXPECT_GE(mpi.thread_level, MPI_THREAD_SERIALIZED);
  EXPECT_EQ(mpi.launched_by_mpirun, std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                                        std::getenv("PMIX_RANK") != nullptr ||
                                        std::getenv("PMI_RANK") != nullptr);
  EXPECT_EQ(mpi.world.get(), &mpi_world());
  // Explicit options that agree with MPI are accepted.
  initialize_mpi(nullptr, nullptr, {.num_processes = size, .process_id = rank});
}

TEST(InitializeMpiTest, CountsTheProcessesOfTheNode) {
  MpiContext mpi = initialize_mpi(nullptr, nullptr);
  MPI_Comm node = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            MPI_SUCCESS);
  int size = 0;
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  EXPECT_EQ(mpi.local_processes, size);
  EXPECT_GE(mpi.local_processes, 1);
  EXPECT_LE(mpi.local_processes, mpi.num_processes);
}

// The pool of each process is its share of the node's CPUs, within its own CPUs: the
// processes of a node together start no more threads than it has CPUs (each at least one).
TEST(InitializeMpiTest, PoolThreadsShareTheNode) {
  EXPECT_EQ(pool_threads_per_process(2, 2, 4), 1u);  // np 4 on 2 cores
  EXPECT_EQ(pool_threads_per_process(1, 2, 2), 1u);  // np 2, each bound to a core
  EXPECT_EQ(pool_threads_per_process(8, 8, 2), 4u);
  EXPECT_EQ(pool_threads_per_process(2, 8, 2), 2u);  // bound to 2 of its 4
  EXPECT_EQ(pool_threads_per_process(16, 16, 1), 16u);
  EXPECT_EQ(pool_threads_per_process(4, 4, 0), 4u);  // no count: the whole node
  if (std::getenv(kThreadsEnvVar) != nullptr) GTEST_SKIP() << "MESHLAYOUT_THREADS is set";
  const MpiContext mpi = initialize_mpi(nullptr, nullptr);
  const size_t threads = default_runtime()->pool().size();
  const size_t cpus = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_LE(threads, available_cpus());
  if (static_cast<size_t>(mpi.local_processes) <= cpus) {
    EXPECT_LE(threads * static_cast<size_t>(mpi.local_processes), cpus);
  } else {
    EXPECT_EQ(threads, 1u);
  }
}

TEST(InitializeMpiTest, WrongProcessCountIsAValueErrorOnEveryRank) {
  const int size = mpi_num_processes();
  try {
    initialize_mpi(nullptr, nullptr, {.num_processes = size + 1});
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string prefix =
        fmt::format("rank 0: initialize_mpi: num_processes={} but MPI reports {} process{}; ",
                    size + 1, size, size == 1 ? "" : "es");
    EXPECT_EQ(std::string(e.what()).substr(0, prefix.size()), prefix) << e.what();
    EXPECT_NE(std::string(e.what()).find(fmt::format("mpirun -np {}", size + 1)), std::string::npos)
        << e.what();
  }
}

TEST(InitializeMpiTest, WrongProcessIdOnOneRankFailsEveryRank) {
  const int size = mpi_num_processes(), me = mpi_process_id(), last = size - 1;
  try {
    // Only the last rank passes a wrong id (its own id + 1).
    initialize_mpi(nullptr, nullptr, {.process_id = me == last ? me + 1 : me});
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("rank {}: initialize_mpi: process_id={} but MPI reports process id {} "
                          "(this process's rank in MPI_COMM_WORLD, 0 to {}); MPI assigns process "
                          "ids at launch",
                          last, last + 1, last, last));
  }
}

TEST(InitializeMpiTest, EnvironmentFillsUnsetOptionsAndExplicitOptionsWin) {
  const int size = mpi_num_processes();
  setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", std::to_string(size + 3).c_str(), 1);
  // Explicit wins over the environment.
  initialize_mpi(nullptr, nullptr, {.num_processes = size});
  try {
    initialize_mpi(nullptr, nullptr);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find(fmt::format(
            "num_processes={} (from KERAS_DISTRIBUTION_NUM_PROCESSES='{}')", size + 3, size + 3)),
        std::string::npos)
        << e.what();
  }
  setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "four", 1);
  try {
    initialize_mpi(nullptr, nullptr);
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("KERAS_DISTRIBUTION_NUM_PROCESSES"), std::string::npos)
        << e.what();
  }
  unsetenv("KERAS_DISTRIBUTION_NUM_PROCESSES");
  initialize_mpi(nullptr, nullptr);
}

// ---- real transfers beyond 2 GiB: opt-in (memory), MESHLAYOUT_MPI_LARGE_TEST=1

TEST(MpiCommunicatorTest, TransfersBeyondTwoGiB) {
  const char* flag = std::getenv("MESHLAYOUT_MPI_LARGE_TEST");
  if (flag == nullptr || std::string(flag) != "1") {
    GTEST_SKIP() << "set MESHLAYOUT_MPI_LARGE_TEST=1 (needs about 6 GiB per process)";
  }
  MpiCommunicator& comm = mpi_world();
  const auto n = static_cast<size_t>(comm.size());
  const auto me = static_cast<size_t>(comm.rank());
  const size_t big = (size_t{1} << 31) + 17;  // > INT_MAX bytes
  {
    // Rank r sends `big` bytes to rank r+1 at an offset beyond INT_MAX.
    const size_t to = (me + 1) % n, from = (me + n - 1) % n;
    const size_t offset = (size_t{1} << 31) + 5;
    std::vector<size_t> sc(n, 0), so(n, 0), rc(n, 0), ro(n, 0);
    sc[to] += big, so[to] = offset;
    rc[from] += big, ro[from] = 3;
    std::vector<uint8_t> send(offset + big);
    for (size_t i = 0; i < big; ++i)
      send[offset + i] = conformance::pattern(static_cast<int>(me), 5, i);
    std::vector<uint8_t> recv(3 + big, 0);
    comm.all_to_all_v(send.data(), sc, so, recv.data(), rc, ro);
    size_t bad = 0;
    for (size_t i = 0; i < big; ++i)
      bad += recv[3 + i] != conformance::pattern(static_cast<int>(from), 5, i);
    EXPECT_EQ(bad, 0u);
  }
  {
    std::vector<uint8_t> data(big, me == 0 ? 0x42 : 0);
    data.back() = me == 0 ? 0x17 : 0;
    comm.broadcast(data.data(), big, 0);
    EXPECT_EQ(data[0], 0x42);
    EXPECT_EQ(data[big / 2], 0x42);
    EXPECT_EQ(data.back(), 0x17);
  }
}

// ---- the harness itself

TEST(MpiTestHarnessTest, FailsOnTheRankNamedByTheEnvironment) {
  // MESHLAYOUT_MPI_TEST_FAIL_RANK=r makes this test fail on rank r only, to check that the run
  // then exits non-zero although rank 0 passed everything.
  const char* rank = std::getenv("MESHLAYOUT_MPI_TEST_FAIL_RANK");
  if (rank == nullptr) GTEST_SKIP() << "set MESHLAYOUT_MPI_TEST_FAIL_RANK to inject a failure";
  EXPECT_NE(std::to_string(mpi_process_id()), rank) << "failure injected on this rank";
}

// ---- main: one gtest run per rank, one report, one verdict

}  // namespace
}  // namespace meshlayout
