#include "meshlayout/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/elementwise_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class ElementwiseTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(ElementwiseTest, EveryLayoutPairGivesTheHostResultBitForBit) {
  const uint64_t seed = testing::test_seed(7301);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  EXPECT_NO_THROW(testing::run_all_elementwise_cases(Runtime::single_process(8), seed));
}

TEST_F(ElementwiseTest, SameLayoutsMoveNothing) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Array a =
      testing::distribute_on(rt, HostTensor::random(DType::kF32, {8, 8}, 1), "data,model", mesh);
  Array b =
      testing::distribute_on(rt, HostTensor::random(DType::kF32, {8, 8}, 2), "data,model", mesh);
  EXPECT_EQ(plan_distribute(b, a.layout()).bytes_moved, 0);
  EXPECT_EQ(add(a, b).layout(), a.layout());
}

// The in-place forms reuse a's buffers and give the copying forms' values bit for bit, with b in
// a's layout or another; add(std::move(x), x) still sees x whole.
TEST_F(ElementwiseTest, InPlaceFormsReuseTheFirstOperandAndMatchTheCopyingForms) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  const HostTensor ha = HostTensor::random(DType::kF32, {8, 8}, 1),
                   hb = HostTensor::random(DType::kF32, {8, 8}, 2);
  for (const char* b_layout : {"data,model", "None,data", "None,None"}) {
    SCOPED_TRACE(b_layout);
    const Array b = testing::distribute_on(rt, hb, b_layout, mesh);
    const Array a = testing::distribute_on(rt, ha, "data,model", mesh);
    for (bool is_add : {true, false}) {
      const HostTensor want = (is_add ? add(a, b) : multiply(a, b)).gather();
      Array moved = testing::distribute_on(rt, ha, "data,model", mesh);
      const std::byte* first = moved.local_shards()[0].buffer.data();
      Array got = is_add ? add(std::move(moved), b) : multiply(std::move(moved), b);
      EXPECT_EQ(got.local_shards()[0].buffer.data(), first)
          << "the first operand's buffers were not reused";
      EXPECT_EQ(got.layout(), a.layout());
      const HostTensor g = got.gather();
      ASSERT_EQ(std::memcmp(g.data(), want.data(), want.num_bytes()), 0);
    }
  }
  Array x = testing::distribute_on(rt, ha, "data,model", mesh);
  const HostTensor doubled = add(x, x).gather();
  Array& same = x;
  const HostTensor got = add(std::move(x), same).gather();
  EXPECT_EQ(std::memcmp(got.data(), doubled.data(), doubled.num_bytes()), 0);
}

TEST_F(ElementwiseTest, BadOperandsNameTheirShapesAndDtypes) {
  DeviceMesh mesh({8}, {"x"});
  auto rt = Runtime::single_process(8);
  Array a = testing::distribute_on(rt, HostTensor::random(DType::kF32, {4, 3}, 1), "x,None", mesh);
  Array b = testing::distribute_on(rt, HostTensor::random(DType::kF32, {3, 4}, 2), "x,None", mesh);
  Array c = testing::distribute_on(rt, HostTensor::random(DType::kF64, {4, 3}, 3), "x,None", mesh);
  Array i = testing::distribute_on(rt, HostTensor::random(DType::kI32, {4, 3}, 4), "x,None", mesh);
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)add(a, b); }),
            "add needs operands of one shape and dtype, got (4, 3) F32 and (3, 4) F32");
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)multiply(a, c); }),
            "multiply needs operands of one shape and dtype, got (4, 3) F32 and (4, 3) F64");
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)add(i, i); }),
            "add runs on F32 or F64 tensors, got I32");
  const Array* none[] = {};
  EXPECT_EQ(testing::ValueErrorMessage(
                [&] { (void)concatenate(std::span<const Array* const>(none, 0), 0); }),
            "concatenate needs at least one input, got none");
  const Array* ab[] = {&a, &b};
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)concatenate(ab, 1); }),
            "concatenate on axis 1 needs inputs of one dtype and equal extents off "
            "that axis: input 0 is (4, 3) F32, input 1 is (3, 4) F32");
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)concatenate(ab, 2); }),
            "concatenate axis 2 is out of range for inputs of rank 2");
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)concatenate(ab, -3); }),
            "concatenate axis -3 is out of range for inputs of rank 2");
}

}  // namespace
}  // namespace meshlayout
