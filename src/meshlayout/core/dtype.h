// dtype.h — element types, named as safetensors names them.
//
//   DType   name   bytes        DType   name   bytes
//   kF64    F64    8            kI64    I64    8
//   kF32    F32    4            kI32    I32    4
//   kF16    F16    2            kI16    I16    2
//   kBF16   BF16   2            kI8     I8     1
//   kU8     U8     1            kBool   BOOL   1
//
// Example:
//   dtype_size(DType::kBF16)      // 2
//   parse_dtype("f32")            // DType::kF32 (case-insensitive; "float32" works too)
#pragma once

#include <cstddef>
#include <string_view>

namespace meshlayout {

enum class DType { kF32, kF64, kBF16, kF16, kI8, kI16, kI32, kI64, kU8, kBool };

/// Bytes per element.
size_t dtype_size(DType dtype);
/// The safetensors name: "F32", "BF16", "BOOL", …
std::string_view dtype_name(DType dtype);
/// Parses a safetensors name or a NumPy-style name ("float32", "bfloat16", "int8", "bool"),
/// case-insensitively; ValueError listing the valid names otherwise.
DType parse_dtype(std::string_view name);
/// True for F32, F64, BF16, F16.
bool is_floating(DType dtype);

}  // namespace meshlayout
