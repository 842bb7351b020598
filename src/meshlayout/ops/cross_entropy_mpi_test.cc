// sparse and categorical cross-entropy under a real mpirun (np 2 and 4): each process holds only
// its devices' logits shards, the per-row statistics cross processes, and every check of
// cross_entropy_test_util.h (values, finite differences, memory, errors) runs on every rank.
// The main() is mpi_gtest_main.cc's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "meshlayout/ops/categorical_crossentropy_test_util.h"
#include "meshlayout/ops/categorical_crossentropy_values_test_util.h"
#include "meshlayout/ops/cross_entropy_test_util.h"

namespace meshlayout {
namespace {

TEST(CrossEntropyMpiTest, EveryLayoutMatchesTheFloat64Reference) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  EXPECT_NO_THROW(testing::run_all_cross_entropy_cases(rt, 9401));
}

// categorical_crossentropy (logits, probabilities, label smoothing) and the sparse loss from
// probabilities: every check of categorical_crossentropy_test_util.h on every rank.
TEST(CrossEntropyMpiTest, CategoricalAndProbabilitiesMatchTheFloat64Formulas) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  EXPECT_NO_THROW(testing::run_all_cce_cases(rt, 9411));
}

// categorical_crossentropy_values and sparse_categorical_crossentropy_values (reduction "none"):
// every values check of categorical_crossentropy_test_util.h on every rank.
TEST(CrossEntropyMpiTest, PerPositionValuesMatchTheFloat64Formulas) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  EXPECT_NO_THROW(testing::run_all_cce_values_cases(rt, 9421));
}

TEST(CrossEntropyMpiTest, ABadLabelOnTheLastProcessIsThrownByAll) {
  auto rt = default_runtime();
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 6, 10};
  HostTensor hy = testing::ce_labels(shape, 4);
  hy.data_as<int32_t>()[3 * 6 + 5] = -3;  // data coordinate 1: the last half of the processes
  const Array x = testing::ce_distribute(rt, testing::ce_logits(DType::kF32, shape, 3),
                                         "data,None,model", mesh);
  const Array y = testing::ce_distribute(rt, hy, "data,None", mesh);
  const int first = rt->num_processes() / 2;
  try {
    sparse_categorical_crossentropy(x, y);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    const std::string want = fmt::format(
        "rank {}: sparse_categorical_crossentropy: label -3 at labels[3, 5] is outside [0, 10)",
        first);
    EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace meshlayout
