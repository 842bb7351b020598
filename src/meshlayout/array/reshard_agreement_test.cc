// Disagreeing reshard targets with thread ranks (reshard_agreement_test.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/array/reshard_agreement_test.h"

namespace meshlayout {
namespace {

TEST(ReshardAgreementTest, DisagreeingTargetsFailEveryProcessAlikeAndMoveNothingBetweenThem) {
  for (int procs : {2, 4}) {
    std::vector<std::string> seen(static_cast<size_t>(procs));
    testing::run_as_processes(
        procs, 8 / procs,
        [&](std::shared_ptr<Runtime> rt) {
          seen[static_cast<size_t>(rt->process_id())] = testing::disagreeing_reshard(rt);
        },
        /*pool_threads=*/2);
    const std::string want =
        fmt::format("processes disagree on reshard: process {} has to=", procs - 1);
    for (const std::string& s : seen) {
      EXPECT_EQ(s, seen[0]);
      EXPECT_EQ(s.rfind(want, 0), 0u) << s;
    }
  }
}

}  // namespace
}  // namespace meshlayout
