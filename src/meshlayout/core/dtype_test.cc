#include "meshlayout/core/dtype.h"

#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

TEST(DTypeTest, SizesAndSafetensorsNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(dtype_name(DType::kBool), "BOOL");
}

TEST(DTypeTest, ParsesSafetensorsAndNumpyNamesCaseInsensitively) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI8, DType::kI16,
                  DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(parse_dtype("f32"), DType::kF32);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("Bool"), DType::kBool);
}

TEST(DTypeTest, UnknownNameListsTheValidOnes) {
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "unknown dtype 'f8'; expected one of F32, F64, BF16, F16, I8, I16, I32, I64, U8, "
                 "BOOL (or float32, bfloat16, int8, …)");
  }
}

}  // namespace
}  // namespace meshlayout
