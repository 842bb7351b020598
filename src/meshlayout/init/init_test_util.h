// init_test_util.h — helpers shared by the init tests (test-only): filling into byte vectors,
// decoding them to doubles, catching ValueError texts, the property-test seed.
//
// Example:
//   std::vector<std::byte> b = fill(Initializer::ones(), {2, 3}, whole({2, 3}), DType::kF16);
//   decode(b, DType::kF16);           // {1, 1, 1, 1, 1, 1}
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout::testing {

inline Box whole(const Shape& shape) { return Box{Shape(shape.size(), 0), shape}; }

inline std::vector<std::byte> fill(const Initializer& init, const Shape& shape, const Box& box,
                                   DType dtype, uint64_t key = 1) {
  std::vector<std::byte> out(static_cast<size_t>(box.num_elements()) * dtype_size(dtype),
                             std::byte{0xA5});
  fill_box(init, shape, box, dtype, out.data(), key);
  return out;
}

/// Floating (and integer) elements as doubles.
inline std::vector<double> decode(const std::vector<std::byte>& bytes, DType dtype) {
  const size_t n = bytes.size() / dtype_size(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const std::byte* p = bytes.data() + i * dtype_size(dtype);
    auto get = [&](auto x) {
      std::memcpy(&x, p, sizeof(x));
      return x;
    };
    switch (dtype) {
      case DType::kF32:
        out[i] = get(float{});
        break;
      case DType::kF64:
        out[i] = get(double{});
        break;
      case DType::kBF16:
        out[i] = float_from_bf16(get(uint16_t{}));
        break;
      case DType::kF16:
        out[i] = float_from_f16(get(uint16_t{}));
        break;
      case DType::kI8:
        out[i] = get(int8_t{});
        break;
      case DType::kI16:
        out[i] = get(int16_t{});
        break;
      case DType::kI32:
        out[i] = get(int32_t{});
        break;
      case DType::kI64:
        out[i] = static_cast<double>(get(int64_t{}));
        break;
      case DType::kU8:
      case DType::kBool:
        out[i] = get(uint8_t{});
        break;
    }
  }
  return out;
}

/// The text of the ValueError `f` throws; a test failure if it throws none.
template <class F>
std::string value_error(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ValueError";
  return "";
}

inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> kDTypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
  return kDTypes;
}

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> kDTypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                             DType::kI8,  DType::kI16, DType::kI32,  DType::kI64,
                                             DType::kU8,  DType::kBool};
  return kDTypes;
}

}  // namespace meshlayout::testing
