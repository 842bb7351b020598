// convert_floats.cc — convert_floats (array_io.h): the dtype conversion of a load with
// convert_dtypes, between F32, F64, BF16 and F16, rounding to nearest even.
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/io/array_io.h"

namespace meshlayout {
namespace {

template <typename From, typename To, typename Load, typename Store>
void convert_loop(const std::byte* src, std::byte* dst, size_t count, Load load, Store store) {
  const From* in = reinterpret_cast<const From*>(src);
  To* out = reinterpret_cast<To*>(dst);
  for (size_t i = 0; i < count; ++i) out[i] = store(load(in[i]));
}

}  // namespace

void convert_floats(const std::byte* src, DType from, std::byte* dst, DType to, size_t count) {
  if (count == 0) return;  // src and dst may be null
  if (from == to) {
    std::memcpy(dst, src, count * dtype_size(from));
    return;
  }
  if (!is_floating(from) || !is_floating(to)) {
    throw ValueError(
        fmt::format("cannot convert {} to {}: conversions are between F32, F64, "
                    "BF16 and F16",
                    dtype_name(from), dtype_name(to)));
  }
  if (from == DType::kF64 && to == DType::kF32) {
    convert_loop<double, float>(
        src, dst, count, [](double v) { return v; },
        [](double v) { return static_cast<float>(v); });
    return;
  }
  if (to == DType::kF64) {  // every other dtype widens to double exactly through float
    auto store = [](float v) { return static_cast<double>(v); };
    switch (from) {
      case DType::kF32:
        convert_loop<float, double>(
            src, dst, count, [](float v) { return v; }, store);
        return;
      case DType::kBF16:
        convert_loop<uint16_t, double>(src, dst, count, float_from_bf16, store);
        return;
      default:
        convert_loop<uint16_t, double>(src, dst, count, float_from_f16, store);
        return;
    }
  }
  // To F32, BF16 or F16 through float (F64 sources round to float first).
  auto convert_to = [&](auto load, auto* from_type) {
    using From = std::remove_pointer_t<decltype(from_type)>;
    switch (to) {
      case DType::kF32:
        convert_loop<From, float>(src, dst, count, load, [](float v) { return v; });
        return;
      case DType::kBF16:
        convert_loop<From, uint16_t>(src, dst, count, load, bf16_from_float);
        return;
      default:
        convert_loop<From, uint16_t>(src, dst, count, load, f16_from_float);
        return;
    }
  };
  switch (from) {
    case DType::kF64:
      convert_to([](double v) { return static_cast<float>(v); }, static_cast<double*>(nullptr));
      return;
    case DType::kF32:
      convert_to([](float v) { return v; }, static_cast<float*>(nullptr));
      return;
    case DType::kBF16:
      convert_to(float_from_bf16, static_cast<uint16_t*>(nullptr));
      return;
    default:
      convert_to(float_from_f16, static_cast<uint16_t*>(nullptr));
      return;
  }
}

}  // namespace meshlayout
