#include "meshlayout/array/host_tensor.h"

#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

TEST(HostTensorTest, ZeroFilledWithDtypeSizedStorage) {
  HostTensor t(DType::kBF16, {3, 5});
  EXPECT_EQ(t.num_bytes(), 30u);
  EXPECT_EQ(t.num_elements(), 15);
  for (size_t i = 0; i < t.num_bytes(); ++i) EXPECT_EQ(t.data()[i], std::byte{0});
  EXPECT_THROW(HostTensor(DType::kF32, {2, -1}), ValueError);
}

TEST(HostTensorTest, RandomIsDeterministicAndValid) {
  HostTensor a = HostTensor::random(DType::kF32, {64}, 3);
  EXPECT_EQ(a, HostTensor::random(DType::kF32, {64}, 3));
  EXPECT_FALSE(a == HostTensor::random(DType::kF32, {64}, 4));
  for (int i = 0; i < 64; ++i) {
    float v = a.data_as<float>()[i];
    EXPECT_TRUE(std::isfinite(v) && v >= -1.0f && v <= 1.0f);
  }
  HostTensor b = HostTensor::random(DType::kBool, {100}, 1);
  for (int i = 0; i < 100; ++i) EXPECT_LE(static_cast<int>(b.data()[i]), 1);
}

}  // namespace
}  // namespace meshlayout
