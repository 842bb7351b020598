// sampling_math.h — Philox words -> uniform and normal variates (internal to the init module).
//
// Every function here is a pure function of its 32-bit inputs, built from +, -, *, /, sqrt and
// integer operations only — no libm — so a value is the same on every CPU, vector width and C
// library (the init library is compiled with -ffp-contract=off: no fused multiply-adds).
// log and cos are our own polynomial versions, accurate to a few ulp, written so that
// compilers vectorise loops over them.
//
//   uniform float  : (w0 >> 8) * 2^-24                          24 bits, in [0, 1)
//   uniform double : ((w0 >> 6) * 2^27 + (w1 >> 5)) * 2^-53      53 bits, in [0, 1)
//   normal         : Box-Muller, sqrt(-2 ln u1) * cos(2 pi u2), u1 in (0, 1], u2 in [0, 1)
//                    float: u1, u2 from w0, w1;  double: u1 from (w0, w1), u2 from (w2, w3)
//
// Example:
//   PhiloxBlock b = philox4x32_10(philox_counter(g), philox_key(key));
//   float z = normal_float(b[0], b[1]);
// IWYU pragma: private, include "meshlayout/init/initializers.h"
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace meshlayout::internal_init {

#define MESHLAYOUT_INIT_INLINE [[gnu::always_inline]] inline

/// c[0] + x * (c[1] + x * (c[2] + …)), evaluated in that order.
template <class T, size_t N>
MESHLAYOUT_INIT_INLINE T horner(T x, const T (&c)[N]) {
  T r = c[N - 1];
#pragma GCC unroll 16
  for (size_t i = 1; i < N; ++i) r = c[N - 1 - i] + x * r;
  return r;
}

MESHLAYOUT_INIT_INLINE float unit_float(uint32_t w) {
  return static_cast<float>(static_cast<int32_t>(w >> 8)) * 0x1p-24f;
}

/// In (0, 1]: never 0, so its logarithm is finite.
MESHLAYOUT_INIT_INLINE float open_unit_float(uint32_t w) {
  return static_cast<float>(static_cast<int32_t>(w >> 8) + 1) * 0x1p-24f;
}

MESHLAYOUT_INIT_INLINE double unit_double(uint32_t w0, uint32_t w1) {
  // Two exact int32 -> double conversions; the sum has 53 significant bits, so it is exact.
  return static_cast<double>(static_cast<int32_t>(w0 >> 6)) * 0x1p-26 +
         static_cast<double>(static_cast<int32_t>(w1 >> 5)) * 0x1p-53;
}

/// Natural logarithm of x in (0, 1] (x normal), float.
MESHLAYOUT_INIT_INLINE float log_unit(float x) {
  // x = 2^k * m with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m - 1) / (m + 1).
  uint32_t ix = std::bit_cast<uint32_t>(x) + (0x3F800000u - 0x3F3504F3u);
  const float k = static_cast<float>(static_cast<int32_t>(ix >> 23) - 127);
  ix = (ix & 0x007FFFFFu) + 0x3F3504F3u;
  const float f = std::bit_cast<float>(ix) - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s;  // <= 0.0295: the series below is good to 2e-9
  static constexpr float kAtanh[] = {1.0f / 3, 1.0f / 5, 1.0f / 7, 1.0f / 9};
  const float p = z * horner(z, kAtanh);
  const float two_s = 2.0f * s;
  constexpr float kLn2Hi = 0.693145751953125f;  // 17 bits: k * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723212e-06f;
  return k * kLn2Hi + ((two_s + two_s * p) + k * kLn2Lo);
}

/// Natural logarithm of x in (0, 1] (x normal), double.
MESHLAYOUT_INIT_INLINE double log_unit(double x) {
  uint64_t ix = std::bit_cast<uint64_t>(x) + (0x3FF0000000000000u - 0x3FE6A09E667F3BCDu);
  const double k = static_cast<double>(static_cast<int32_t>(ix >> 52) - 1023);
  ix = (ix & 0x000FFFFFFFFFFFFFu) + 0x3FE6A09E667F3BCDu;
  const double f = std::bit_cast<double>(ix) - 1.0;
  const double s = f / (2.0 + f);
  const double z = s * s;  // terms up to z^10 / 21: good to 1e-18
  static constexpr double kAtanh[] = {1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                      1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21};
  const double p = z * horner(z, kAtanh);
  const double two_s = 2.0 * s;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 bits: k * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return k * kLn2Hi + ((two_s + two_s * p) + k * kLn2Lo);
}

/// cos(2 pi u) for u in [0, 1), float. Reduced exactly by quarter turns: 4u = q + f.
MESHLAYOUT_INIT_INLINE float cos_2pi(float u) {
  const float t = 4.0f * u;
  const int32_t q = static_cast<int32_t>(t + 0.5f);
  const float x = (t - static_cast<float>(q)) * 1.57079632679489661923f;  // |x| <= pi/4
  const float x2 = x * x;
  static constexpr float kSin[] = {-1.0f / 6, 1.0f / 120, -1.0f / 5040, 1.0f / 362880};
  static constexpr float kCos[] = {1.0f / 24, -1.0f / 720, 1.0f / 40320, -1.0f / 3628800};
  const float sin_x = x + x * x2 * horner(x2, kSin);
  const float cos_x = 1.0f - 0.5f * x2 + x2 * x2 * horner(x2, kCos);
  // cos(q pi/2 + x): q mod 4 = 0 -> cos x, 1 -> -sin x, 2 -> -cos x, 3 -> sin x. Selected
  // with bit masks, not ?:, so that no branch stops the loops over it from vectorising.
  const uint32_t odd = 0u - static_cast<uint32_t>(q & 1);
  const uint32_t r =
      (std::bit_cast<uint32_t>(sin_x) & odd) | (std::bit_cast<uint32_t>(cos_x) & ~odd);
  const uint32_t negate = static_cast<uint32_t>((q + 1) & 2) << 30;  // the sign bit
  return std::bit_cast<float>(r ^ negate);
}

/// cos(2 pi u) for u in [0, 1), double.
MESHLAYOUT_INIT_INLINE double cos_2pi(double u) {
  const double t = 4.0 * u;
  const int32_t q = static_cast<int32_t>(t + 0.5);
  const double x = (t - static_cast<double>(q)) * 1.57079632679489661923;
  const double x2 = x * x;
  // Taylor terms to x^17 and x^18: the first ones left out are below 1e-18 on [-pi/4, pi/4].
  static constexpr double kSin[] = {
      -1.0 / 6,        1.0 / 120,        -1.0 / 5040,          1.0 / 362880,
      -1.0 / 39916800, 1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000};
  static constexpr double kCos[] = {
      1.0 / 24,        -1.0 / 720,         1.0 / 40320,          -1.0 / 3628800,
      1.0 / 479001600, -1.0 / 87178291200, 1.0 / 20922789888000, -1.0 / 6402373705728000};
  const double sin_x = x + x * x2 * horner(x2, kSin);
  const double cos_x = 1.0 - 0.5 * x2 + x2 * x2 * horner(x2, kCos);
  const uint64_t odd = 0u - static_cast<uint64_t>(q & 1);
  const uint64_t r =
      (std::bit_cast<uint64_t>(sin_x) & odd) | (std::bit_cast<uint64_t>(cos_x) & ~odd);
  const uint64_t negate = static_cast<uint64_t>((q + 1) & 2) << 62;
  return std::bit_cast<double>(r ^ negate);
}

/// A standard normal float from two Philox words (Box-Muller, cosine branch).
MESHLAYOUT_INIT_INLINE float normal_float(uint32_t w0, uint32_t w1) {
  return std::sqrt(-2.0f * log_unit(open_unit_float(w0))) * cos_2pi(unit_float(w1));
}

/// A standard normal double from the four words of a Philox block.
MESHLAYOUT_INIT_INLINE double normal_double(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  const double u1 = 1.0 - unit_double(w0, w1);  // exact, in (0, 1]
  return std::sqrt(-2.0 * log_unit(u1)) * cos_2pi(unit_double(w2, w3));
}

}  // namespace meshlayout::internal_init
