#include "meshlayout/array/host_tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <new>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/memory_budget.h"

namespace meshlayout {

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t e : shape_) {
    if (e < 0) {
      throw ValueError(
          fmt::format("HostTensor shape {} has a negative extent", shape_to_string(shape_)));
    }
  }
  const int64_t bytes = meshlayout::num_bytes(shape_, dtype);
  const auto what = [&] {
    return fmt::format("host tensor {} {}", shape_to_string(shape_), dtype_name(dtype));
  };
  check_host_allocation(what(), bytes);
  try {
    bytes_.resize(static_cast<size_t>(bytes));
  } catch (const std::bad_alloc&) {
    throw ResourceExhaustedError(fmt::format("{}: the system refused {} (out of memory)", what(),
                                             format_bytes(static_cast<uint64_t>(bytes))));
  }
}

HostTensor HostTensor::random(DType dtype, Shape shape, uint64_t seed) {
  HostTensor t(dtype, std::move(shape));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&state] {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const int64_t n = t.num_elements();
  std::byte* p = t.data();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t r = next();
    switch (dtype) {
      case DType::kF32: {
        float v = static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        std::memcpy(p + i * 4, &v, 4);
        break;
      }
      case DType::kF64: {
        double v = static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        std::memcpy(p + i * 8, &v, 8);
        break;
      }
      case DType::kBF16:
      case DType::kF16: {
        // A finite half/bfloat: keep the exponent below all-ones.
        uint16_t v = static_cast<uint16_t>(r) & 0xBFFF;
        std::memcpy(p + i * 2, &v, 2);
        break;
      }
      case DType::kBool:
        p[i] = static_cast<std::byte>(r & 1);
        break;
      default: {
        size_t size = dtype_size(dtype);
        std::memcpy(p + static_cast<size_t>(i) * size, &r, size);
      }
    }
  }
  return t;
}

}  // namespace meshlayout
