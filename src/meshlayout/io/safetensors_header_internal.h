// safetensors_header_internal.h — what the header parser (safetensors_header.cc) and writer
// (safetensors_header_writer.cc) share: the format's dtype table, message quoting and the
// overflow-checked byte count. Not part of the API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/shape.h"

namespace meshlayout::safetensors_detail {

struct DTypeRow {
  std::string_view name;
  size_t size;
  std::optional<DType> dtype;
};

// In the reference implementation's enum order: its writer lays tensors out by this order,
// descending, then by name.
constexpr std::array<DTypeRow, 17> kSafetensorsDTypes{{
    {"BOOL", 1, DType::kBool},
    {"U8", 1, DType::kU8},
    {"I8", 1, DType::kI8},
    {"F8_E5M2", 1, {}},
    {"F8_E4M3", 1, {}},
    {"F8_E8M0", 1, {}},
    {"I16", 2, DType::kI16},
    {"U16", 2, {}},
    {"F16", 2, DType::kF16},
    {"BF16", 2, DType::kBF16},
    {"I32", 4, DType::kI32},
    {"U32", 4, {}},
    {"F32", 4, DType::kF32},
    {"F64", 8, DType::kF64},
    {"I64", 8, DType::kI64},
    {"U64", 8, {}},
    {"C64", 8, {}},
}};

inline const DTypeRow* find_dtype(std::string_view name) {
  for (const DTypeRow& row : kSafetensorsDTypes) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

inline size_t dtype_order(std::string_view name) {
  for (size_t i = 0; i < kSafetensorsDTypes.size(); ++i) {
    if (kSafetensorsDTypes[i].name == name) return i;
  }
  return 0;
}

// A name as it can be printed in a message: quoted, control bytes escaped, long names cut.
std::string quote_name(std::string_view name);

// The bytes of a tensor of `shape` (extents >= 0) and `element_size`, or std::nullopt if the
// element count overflows int64 at any step of num_elements()'s left-to-right product (so
// TensorInfo::num_elements() is always defined) or the byte count overflows 64 bits.
inline std::optional<uint64_t> checked_num_bytes(const Shape& shape, size_t element_size) {
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(elements, d, &elements)) return std::nullopt;
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements), element_size, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

}  // namespace meshlayout::safetensors_detail
