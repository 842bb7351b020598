// float_convert.h — float <-> bfloat16 / IEEE half conversions, as raw 16-bit patterns.
//
// float -> 16 bits rounds to nearest, ties to even (as NumPy, ml_dtypes, PyTorch and XLA do):
// values beyond the 16-bit range become infinities, tiny ones become subnormals or zeros, NaNs
// stay NaNs (quiet). The 16 -> float direction is exact. All functions are branch-free so loops
// over them vectorise; they assume the default floating-point rounding mode.
//
// Example:
//   bf16_from_float(1.0f)          // 0x3F80
//   f16_from_float(65504.0f)       // 0x7BFF, the largest half;  f16_from_float(65520.0f) == 0x7C00
//   float_from_f16(0x0001)         // 5.96e-08 (2^-24), the smallest subnormal half
#pragma once

#include <bit>
#include <cstdint>

namespace meshlayout {

/// bfloat16 bits of `f`, rounded to nearest even.
[[gnu::always_inline]] inline uint16_t bf16_from_float(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

/// The float a bfloat16 bit pattern stands for (exact).
inline float float_from_bf16(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

/// IEEE 754 binary16 bits of `f`, rounded to nearest even.
[[gnu::always_inline]] inline uint16_t f16_from_float(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  // Normal halves (|f| >= 2^-14): rebias the exponent by 127 - 15 and round 23 -> 10 mantissa
  // bits; a carry out of the mantissa correctly bumps the exponent (up to infinity).
  const uint32_t n = a - 0x38000000u;
  const uint32_t normal = (n + 0x0FFFu + ((n >> 13) & 1u)) >> 13;
  // Subnormal halves: adding 0.5f makes the FPU round |f| to a multiple of 2^-24 (the half
  // subnormal step, the ulp of floats in [0.5, 1)); the bit distance from 0.5f is the count.
  const float biased = std::bit_cast<float>(a) + 0.5f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(biased) - 0x3F000000u;
  // Selected with bit masks rather than ?: so that loops over this function vectorise.
  const uint32_t is_normal = 0u - static_cast<uint32_t>(a >= 0x38800000u);
  const uint32_t is_inf = 0u - static_cast<uint32_t>(a >= 0x477FF000u);  // >= 65520 or inf
  const uint32_t is_nan = 0u - static_cast<uint32_t>(a > 0x7F800000u);
  uint32_t h = (normal & is_normal) | (subnormal & ~is_normal);
  h = (0x7C00u & is_inf) | (h & ~is_inf);
  h = (0x7E00u & is_nan) | (h & ~is_nan);
  return static_cast<uint16_t>(sign | h);
}

/// The float an IEEE half bit pattern stands for (exact).
inline float float_from_f16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace meshlayout
