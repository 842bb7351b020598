// Disagreeing reshard targets under mpirun (reshard_agreement_test.h); main() is
// mpi_gtest_main.cc's.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "meshlayout/array/reshard_agreement_test.h"

namespace meshlayout {
namespace {

TEST(ReshardAgreementMpiTest, DisagreeingTargetsFailEveryProcessAlike) {
  auto rt = default_runtime();
  const std::string seen = testing::disagreeing_reshard(rt);
  EXPECT_EQ(seen.rfind(fmt::format("processes disagree on reshard: process {} has to=",
                                   rt->num_processes() - 1),
                       0),
            0u)
      << seen;
  // The same text on every process.
  unsigned long long mine = std::hash<std::string>{}(seen), lo = mine, hi = mine;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << seen;
}

}  // namespace
}  // namespace meshlayout
