#include "meshlayout/runtime/operation_agreement.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/in_process_communicator.h"

namespace meshlayout {
namespace {

// Runs agree_on_operation on `n` thread ranks with description(rank); returns what each rank
// saw: "ok" or the error text.
std::vector<std::string> agree(int n, const std::function<std::string(int)>& description) {
  std::vector<std::string> seen(static_cast<size_t>(n));
  run_in_process_group(n, [&](Communicator& comm) {
    try {
      agree_on_operation(comm, "reshard", description(comm.rank()));
      seen[static_cast<size_t>(comm.rank())] = "ok";
    } catch (const ValueError& e) {
      seen[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  return seen;
}

TEST(AgreeOnOperationTest, SameDescriptionReturnsEverywhere) {
  EXPECT_EQ(agree(4,
                  [](int) {
                    return describe_fields({"shape=(8, 6)", "to=None,model"});
                  }),
            std::vector<std::string>(4, "ok"));
}

TEST(AgreeOnOperationTest, OneDifferentRankFailsEveryRankNamingTheField) {
  const auto seen = agree(4, [](int r) {
    return describe_fields({"shape=(8, 6)", r == 3 ? "to=data,None" : "to=None,model", "repeat=3"});
  });
  const std::string want =
      "processes disagree on reshard: process 3 has to=data,None but process 0 has "
      "to=None,model; every process must run the same operation with the same arguments and "
      "environment";
  EXPECT_EQ(seen, std::vector<std::string>(4, want));
}

TEST(AgreeOnOperationTest, NamesTheFirstDifferingRankAndCountsTheRest) {
  const auto seen = agree(4, [](int r) { return fmt::format("repeat={}", r == 0 ? 9 : r); });
  EXPECT_EQ(seen[0], seen[2]);
  EXPECT_NE(seen[0].find("process 1 has repeat=1 but process 0 has repeat=9"), std::string::npos)
      << seen[0];
  EXPECT_NE(seen[0].find("(processes [2, 3] differ from process 0 too)"), std::string::npos)
      << seen[0];
}

TEST(AgreeOnOperationTest, ExtraFieldAndLongValuesAreShownCapped) {
  const std::string long_value(10000, 'x');
  const auto seen = agree(2, [&](int r) {
    return r == 0 ? describe_fields({"a=1"}) : describe_fields({"a=1", "b=" + long_value});
  });
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_NE(seen[0].find("but process 0 has (nothing)"), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("(10002 bytes)"), std::string::npos);
  EXPECT_LT(seen[0].size(), 500u);
}

TEST(AgreeOnOperationTest, GroupStaysUsableAfterADisagreement) {
  run_in_process_group(3, [](Communicator& comm) {
    EXPECT_THROW(agree_on_operation(comm, "x", comm.rank() == 1 ? "a" : "b"), ValueError);
    agree_on_operation(comm, "x", "same");  // returns on every rank
    int64_t one = 1;
    comm.all_reduce_sum(&one, 1, DType::kI64);
    EXPECT_EQ(one, 3);
  });
}

// agree_on_operation with a local error: one all_gather decides both; a failure wins.
TEST(AgreeOnOperationTest, WithAnErrorAFailureWinsOverADisagreementOnEveryRank) {
  std::vector<std::string> seen(4);
  run_in_process_group(4, [&](Communicator& comm) {
    std::exception_ptr error;
    if (comm.rank() == 2) error = std::make_exception_ptr(DataLossError("disk gone"));
    try {
      agree_on_operation(comm, "reshard", comm.rank() == 3 ? "to=a" : "to=b", error);
      seen[static_cast<size_t>(comm.rank())] = "ok";
    } catch (const DataLossError& e) {
      seen[static_cast<size_t>(comm.rank())] = e.what();
    }
  });
  EXPECT_EQ(seen, std::vector<std::string>(4, "rank 2: disk gone"));
}

TEST(AgreeOnOperationTest, WithoutAnErrorItChecksTheDescriptionsAndStaysUsable) {
  const auto seen = agree(3, [](int r) { return r == 1 ? "to=a" : "to=b"; });
  std::vector<std::string> with_null(3);
  run_in_process_group(3, [&](Communicator& comm) {
    try {
      agree_on_operation(comm, "reshard", comm.rank() == 1 ? "to=a" : "to=b", nullptr);
      with_null[static_cast<size_t>(comm.rank())] = "ok";
    } catch (const ValueError& e) {
      with_null[static_cast<size_t>(comm.rank())] = e.what();
    }
    agree_on_operation(comm, "reshard", "same", nullptr);  // returns on every rank
  });
  EXPECT_EQ(with_null, seen);
}

TEST(AgreeOnOperationTest, SingleRankWithAnErrorThrowsIt) {
  std::unique_ptr<Communicator> comm = make_single_process_communicator();
  agree_on_operation(*comm, "x", "anything", nullptr);
  try {
    agree_on_operation(*comm, "x", "anything", std::make_exception_ptr(ValueError("bad")));
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "rank 0: bad");
  }
}

TEST(AgreeOnOperationTest, SingleRankNeverCommunicates) {
  std::unique_ptr<Communicator> comm = make_single_process_communicator();
  agree_on_operation(*comm, "x", "anything");
}

}  // namespace
}  // namespace meshlayout
