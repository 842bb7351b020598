#include "meshlayout/runtime/in_process_communicator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/communicator_conformance.h"

namespace meshlayout {
namespace {

// ---- the conformance suite on 1, 2, 3 and 4 thread ranks

class InProcessConformanceTest
    : public ::testing::TestWithParam<std::tuple<conformance::Check, int>> {};

TEST_P(InProcessConformanceTest, Passes) {
  const auto& [check, n] = GetParam();
  run_in_process_group(n, [&](Communicator& comm) { check.run(comm); });
}

INSTANTIATE_TEST_SUITE_P(AllChecks, InProcessConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(conformance::kChecks),
                                            ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return fmt::format("{}_{}ranks", std::get<0>(info.param).name,
                                              std::get<1>(info.param));
                         });

TEST(InProcessConformanceTest, WholeSuiteInOneGroup) {
  run_in_process_group(4,
                       [](Communicator& comm) { conformance::run_communicator_conformance(comm); });
}

TEST(SingleProcessCommunicatorTest, PassesConformance) {
  std::unique_ptr<Communicator> comm = make_single_process_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  conformance::run_communicator_conformance(*comm);
}

// ---- agreement on a local failure

// The ranks' values added in rank order: every rank the same double, bit for bit, even where
// another order would round differently; one rank gets its own value.
TEST(SumInRankOrderTest, EveryRankGetsTheRankOrderSum) {
  const double values[] = {1e16, 1.0, -1e16, 1.0};  // in rank order: 1.0; other orders differ
  const double want = ((values[0] + values[1]) + values[2]) + values[3];
  std::vector<double> got(4);
  run_in_process_group(4, [&](Communicator& comm) {
    got[static_cast<size_t>(comm.rank())] = sum_in_rank_order(comm, values[comm.rank()]);
  });
  for (double g : got) EXPECT_EQ(g, want);
  EXPECT_NE(want, ((values[3] + values[2]) + values[1]) + values[0]);
  std::unique_ptr<Communicator> one = make_single_process_communicator();
  EXPECT_EQ(sum_in_rank_order(*one, 2.5), 2.5);
}

TEST(InProcessAgreeOnFailureTest, EveryRankThrowsTheFailingRanksError) {
  std::vector<std::string> messages(4);
  run_in_process_group(4, [&](Communicator& comm) {
    std::exception_ptr err;
    try {
      if (comm.rank() == 2) throw ValueError("disk full on rank 2");
    } catch (...) {
      err = std::current_exception();
    }
    try {
      agree_on_failure(comm, err);
      messages[static_cast<size_t>(comm.rank())] = "returned";
    } catch (const ValueError& e) {
      messages[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_EQ(messages, std::vector<std::string>(4, "rank 2: disk full on rank 2"));
}

TEST(InProcessAgreeOnFailureTest, GroupIsUsableAfterAFailure) {
  run_in_process_group(3, [](Communicator& comm) {
    for (int round = 0; round < 3; ++round) {
      const std::string local =
          comm.rank() == round ? fmt::format("failed in round {}", round) : "";
      EXPECT_THROW(agree_on_failure(comm, local), Error);
      agree_on_failure(comm, "");  // no failure now: returns everywhere
      conformance::check_sequence(comm);
    }
  });
}

// ---- argument checks: every rank throws the same error, nobody hangs

/// Runs `fn` on n ranks; every rank must throw E; returns the messages by rank.
template <typename E>
std::vector<std::string> messages_of(int n, const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> messages(static_cast<size_t>(n));
  run_in_process_group(n, [&](Communicator& comm) {
    std::string& mine = messages[static_cast<size_t>(comm.rank())];
    try {
      fn(comm);
      mine = "(no error)";
    } catch (const E& e) {
      mine = e.what();
    }
    // The group is still usable after the error.
    int64_t v = 1;
    comm.all_reduce_sum(&v, 1, DType::kI64);
    EXPECT_EQ(v, comm.size());
  });
  return messages;
}

TEST(InProcessGroupTest, RanksCallingDifferentCollectivesAllThrow) {
  auto messages = messages_of<InternalError>(3, [](Communicator& comm) {
    int64_t v = 0, all[3];
    if (comm.rank() == 1) {
      comm.broadcast(&v, sizeof v, 0);
    } else {
      comm.all_gather(&v, sizeof v, all);
    }
  });
  EXPECT_EQ(messages, std::vector<std::string>(
                          3,
                          "ranks called different collectives (rank 0: all_gather, rank 1: "
                          "broadcast, rank 2: all_gather); every rank must call the same "
                          "collectives in the same order"));
}

TEST(InProcessGroupTest, AllToAllVCountMismatchNamesRanksAndCounts) {
  auto messages = messages_of<InternalError>(4, [](Communicator& comm) {
    std::vector<size_t> counts(4, 0), offsets(4, 0);
    std::vector<size_t> recv_counts(4, 0);
    if (comm.rank() == 1) counts[3] = 12;
    if (comm.rank() == 3) recv_counts[1] = 10;
    std::vector<uint8_t> send(16), recv(16);
    comm.all_to_all_v(send.data(), counts, offsets, recv.data(), recv_counts, offsets);
  });
  EXPECT_EQ(messages, std::vector<std::string>(
                          4,
                          "all_to_all_v: rank 1 sends 12 bytes to rank 3 but rank 3 expects "
                          "10 bytes from rank 1"));
}

TEST(InProcessGroupTest, AllToAllVWrongSpanLength) {
  auto messages = messages_of<InternalError>(2, [](Communicator& comm) {
    std::vector<size_t> two(2, 0), three(3, 0);
    uint8_t buf[1];
    comm.all_to_all_v(buf, two, comm.rank() == 0 ? three : two, buf, two, two);
  });
  EXPECT_EQ(messages[0],
            "all_to_all_v: rank 0 passed send_offsets with 3 entries; expected 2 "
            "(one per rank)");
  EXPECT_EQ(messages[1], messages[0]);
}

TEST(InProcessGroupTest, MismatchedCountsRootsAndBytes) {
  auto reduce = messages_of<InternalError>(2, [](Communicator& comm) {
    float v[3] = {};
    comm.all_reduce_sum(v, comm.rank() == 0 ? 3 : 2, DType::kF32);
  });
  EXPECT_EQ(reduce[1],
            "all_reduce_sum: rank 0 passes 3 elements of F32 but rank 1 passes 2 "
            "elements of F32");
  auto scatter = messages_of<InternalError>(2, [](Communicator& comm) {
    double send[4] = {}, recv[2];
    comm.reduce_scatter_sum(send, recv, 2, comm.rank() == 0 ? DType::kF64 : DType::kI64);
  });
  EXPECT_EQ(scatter[0],
            "reduce_scatter_sum: rank 0 passes 2 elements of F64 but rank 1 passes 2 "
            "elements of I64");
  auto root = messages_of<InternalError>(3, [](Communicator& comm) {
    int v = 0;
    comm.broadcast(&v, sizeof v, comm.rank() == 2 ? 1 : 0);
  });
  EXPECT_EQ(root[0], "broadcast: rank 0 names root 0 but rank 2 names root 1");
  auto gather = messages_of<InternalError>(2, [](Communicator& comm) {
    uint8_t send[8] = {}, recv[16];
    comm.all_gather(send, comm.rank() == 0 ? 8 : 4, recv);
  });
  EXPECT_EQ(gather[1],
            "all_gather: rank 0 contributes 8 bytes but rank 1 contributes 4; every "
            "rank must pass the same byte count");
}

TEST(InProcessGroupTest, UnsupportedDtypeAndBadRootAreValueErrors) {
  auto dtype = messages_of<ValueError>(2, [](Communicator& comm) {
    uint16_t v[2] = {};
    comm.all_reduce_sum(v, 2, DType::kF16);
  });
  EXPECT_EQ(dtype[0], "all_reduce_sum does not support dtype F16; supported: F32, F64, I32, I64");
  auto root = messages_of<ValueError>(4, [](Communicator& comm) {
    int v = 0;
    comm.broadcast(&v, sizeof v, -1);
  });
  EXPECT_EQ(root[3], "broadcast root -1 is out of range for a group of 4 ranks; expected 0 to 3");
}

// ---- ranks that leave

TEST(InProcessGroupTest, RankThatReturnsEarlyFailsTheOthersInsteadOfHanging) {
  try {
    run_in_process_group(3, [](Communicator& comm) {
      if (comm.rank() == 0) return;  // skips the barrier the others call
      comm.barrier();
    });
    FAIL() << "expected FailedPreconditionError";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("is in barrier but rank [0] left the group"),
              std::string::npos)
        << e.what();
  }
}

TEST(InProcessGroupTest, RethrowsTheRootCauseNotTheRanksLeftWaiting) {
  try {
    run_in_process_group(4, [](Communicator& comm) {
      if (comm.rank() == 2) throw std::runtime_error("boom on rank 2");
      int64_t v = 1;
      comm.all_reduce_sum(&v, 1, DType::kI64);
    });
    FAIL() << "expected the runtime_error of rank 2";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom on rank 2");
  }
}

TEST(InProcessGroupTest, RejectsEmptyGroup) {
  try {
    make_in_process_group(0);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "an in-process group needs at least 1 rank, got 0");
  }
}

// ---- semantics only threads can observe

TEST(InProcessGroupTest, BarrierSeparatesPhases) {
  constexpr int kRanks = 4, kPhases = 100;
  std::atomic<int> arrived{0};
  run_in_process_group(kRanks, [&](Communicator& comm) {
    EXPECT_EQ(comm.backend(), "in-process");
    for (int phase = 1; phase <= kPhases; ++phase) {
      arrived.fetch_add(1);
      comm.barrier();
      // Every rank has incremented for this phase, and none for the next one yet.
      EXPECT_EQ(arrived.load(), kRanks * phase);
      comm.barrier();
    }
  });
}

TEST(InProcessGroupTest, FloatSumsAreBitIdenticalOnEveryRank) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(fmt::format("seed {}", seed));
  constexpr int kRanks = 4;
  constexpr size_t kCount = 4097;
  std::vector<std::vector<float>> results(kRanks);
  run_in_process_group(kRanks, [&](Communicator& comm) {
    std::mt19937 rng(seed + static_cast<unsigned>(comm.rank()));
    std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
    std::vector<float> v(kCount);
    for (float& x : v) x = dist(rng);
    comm.all_reduce_sum(v.data(), kCount, DType::kF32);
    results[static_cast<size_t>(comm.rank())] = std::move(v);
  });
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(),
                          kCount * sizeof(float)),
              0)
        << "rank " << r;
  }
}

TEST(InProcessGroupTest, AllReduceSumsInRankOrder) {
  // 1e8f + 1 + 1 + ... is order-dependent in float: the result shows the order.
  run_in_process_group(3, [](Communicator& comm) {
    float v[3] = {comm.rank() == 0 ? 1e8f : 4.0f, 1.0f, -1.0f};
    comm.all_reduce_sum(v, 3, DType::kF32);
    EXPECT_EQ(v[0], (1e8f + 4.0f) + 4.0f);
    EXPECT_EQ(v[1], 3.0f);
    EXPECT_EQ(v[2], -3.0f);
  });
}

}  // namespace
}  // namespace meshlayout
