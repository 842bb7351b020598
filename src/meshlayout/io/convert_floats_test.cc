// convert_floats_test.cc — convert_floats (array_io.h, convert_floats.cc): exact widening and
// round-to-nearest narrowing between the floating dtypes; integers refused. Loads that convert:
// array_io_test.cc (ConvertsFloatDtypesOnlyWhenAsked).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/io/array_io.h"

namespace meshlayout {
namespace {

TEST(ConvertFloats, RoundsAndWidensExactly) {
  const float values[] = {1.0f, -2.5f, 3.14159265f, 65504.0f, 1e-8f, 0.0f};
  std::vector<std::byte> f64(6 * 8), f32(6 * 4), bf16(6 * 2);
  convert_floats(reinterpret_cast<const std::byte*>(values), DType::kF32, f64.data(), DType::kF64,
                 6);
  convert_floats(f64.data(), DType::kF64, f32.data(), DType::kF32, 6);
  EXPECT_EQ(0, std::memcmp(f32.data(), values, sizeof values));
  convert_floats(f64.data(), DType::kF64, bf16.data(), DType::kBF16, 6);
  for (int i = 0; i < 6; ++i) {
    uint16_t bits;
    std::memcpy(&bits, bf16.data() + 2 * i, 2);
    EXPECT_EQ(bits, bf16_from_float(values[i])) << i;
  }
  EXPECT_THROW(convert_floats(f32.data(), DType::kF32, f64.data(), DType::kI32, 1), ValueError);
}

}  // namespace
}  // namespace meshlayout
