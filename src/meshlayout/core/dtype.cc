#include "meshlayout/core/dtype.h"

#include <fmt/format.h>

#include <array>
#include <string>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::string_view numpy_name;
  size_t size;
};

constexpr std::array<DTypeInfo, 10> kDTypes{{
    {DType::kF32, "F32", "float32", 4},
    {DType::kF64, "F64", "float64", 8},
    {DType::kBF16, "BF16", "bfloat16", 2},
    {DType::kF16, "F16", "float16", 2},
    {DType::kI8, "I8", "int8", 1},
    {DType::kI16, "I16", "int16", 2},
    {DType::kI32, "I32", "int32", 4},
    {DType::kI64, "I64", "int64", 8},
    {DType::kU8, "U8", "uint8", 1},
    {DType::kBool, "BOOL", "bool", 1},
}};

const DTypeInfo& info(DType dtype) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.dtype == dtype) return i;
  }
  throw InternalError(fmt::format("unknown DType value {}", static_cast<int>(dtype)));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).size; }

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

DType parse_dtype(std::string_view name) {
  const std::string n = lower(name);
  for (const DTypeInfo& i : kDTypes) {
    if (n == lower(i.name) || n == i.numpy_name) return i.dtype;
  }
  throw ValueError(fmt::format(
      "unknown dtype {}; expected one of F32, F64, BF16, F16, I8, I16, I32, I64, U8, BOOL (or "
      "float32, bfloat16, int8, …)",
      quote(name)));
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kBF16 ||
         dtype == DType::kF16;
}

}  // namespace meshlayout
