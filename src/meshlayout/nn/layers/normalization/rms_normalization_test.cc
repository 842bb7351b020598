// RMSNormalization's build: the scale in F32 or F64 (the dtype it computes in), refused in any
// other dtype as LayerNormalization and BatchNormalization refuse theirs. Its call and backward
// against float64 references: nn/normalization_backward_test.cc, nn/transformer_layers_test.cc.
#include "meshlayout/nn/layers/normalization/rms_normalization.h"

#include <gtest/gtest.h>

#include <memory>

#include "meshlayout/layout/devices.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class RMSNormalizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
};

// The layer made under floatx `dtype` (its scale's dtype), not yet built.
std::shared_ptr<RMSNormalization> made_under(DType dtype) {
  FloatxScope scope(dtype);
  return std::make_shared<RMSNormalization>();
}

TEST_F(RMSNormalizationTest, BuildsInFloat32AndFloat64) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    std::shared_ptr<RMSNormalization> norm = made_under(dtype);
    norm->maybe_build({2, 4});
    ASSERT_NE(norm->scale(), nullptr);
    EXPECT_EQ(norm->scale()->dtype(), dtype);
    EXPECT_EQ(norm->scale()->value().shape(), Shape({4}));
  }
}

TEST_F(RMSNormalizationTest, BuildRefusesHalfPrecisionScales) {
  EXPECT_EQ(testing::ValueErrorMessage([&] {
              made_under(DType::kBF16)->maybe_build({2, 4});
            }),
            "RMSNormalization layer 'rms_normalization' has BF16 weights (its dtype); it "
            "computes in F32 or F64 only: build it under floatx F32 or F64");
  EXPECT_EQ(testing::ValueErrorMessage([&] {
              made_under(DType::kF16)->maybe_build({3, 8});
            }),
            "RMSNormalization layer 'rms_normalization_1' has F16 weights (its dtype); it "
            "computes in F32 or F64 only: build it under floatx F32 or F64");
}

TEST_F(RMSNormalizationTest, BuildRefusesRankZero) {
  EXPECT_EQ(testing::ValueErrorMessage([&] { made_under(DType::kF32)->maybe_build({}); }),
            "RMSNormalization layer 'rms_normalization' needs inputs of rank >= 1, got shape ()");
}

}  // namespace
}  // namespace meshlayout
