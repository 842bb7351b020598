// The matmul rules under a real mpirun (np 2 and 4): each process holds only its devices'
// shards, partial sums cross processes with exchange_boxes, and every check of
// matmul_test_util.h runs on every rank. The main() is mpi_gtest_main.cc's.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_test_util.h"

namespace meshlayout {
namespace {

TEST(MatmulMpiTest, EveryRuleMatchesTheFloat64Reference) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  ASSERT_EQ(rt->global_device_count(), 8) << "run with 8 global devices (the default)";
  EXPECT_NO_THROW(testing::run_all_matmul_cases(rt, 9001));
}

TEST(MatmulMpiTest, RowParallelAllReduceAcrossProcesses) {
  auto rt = default_runtime();
  testing::MatmulCase c{"row",
                        "mesh[x=8]",
                        {33, 70},
                        {70, 19},
                        "None,x",
                        "x,None",
                        "",
                        "layout[None,None]",
                        MatmulReduction::kAllReduce};
  MatmulPlan plan = testing::run_matmul_case(rt, c, DType::kF32, 9002);
  EXPECT_EQ(plan.all_reduce_in_two_steps, rt->num_processes() > 2);
}

TEST(MatmulMpiTest, BadOperandsFailOnEveryProcessWithoutCommunication) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Array x = distribute_tensor(HostTensor::random(DType::kF32, {8, 6}, 1),
                              TensorLayout({"data", "model"}, mesh));
  Array w = distribute_tensor(HostTensor::random(DType::kF32, {5, 4}, 2),
                              TensorLayout({"model", None}, mesh));
  try {
    matmul(x, w);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul: contracted dimensions differ: x has shape (8, 6) (K = 6) but w has "
                 "shape (5, 4) (K = 5)");
  }
  Array w64 = distribute_tensor(HostTensor::random(DType::kF64, {6, 4}, 2),
                                TensorLayout({"model", None}, mesh));
  EXPECT_THROW(matmul(x, w64), ValueError);
  Array w2 = distribute_tensor(HostTensor::random(DType::kF32, {6, 4}, 3),
                               TensorLayout({"model", None}, mesh));
  EXPECT_EQ(matmul(x, w2).gather().shape(), (Shape{8, 4}));  // still usable
}

}  // namespace
}  // namespace meshlayout
