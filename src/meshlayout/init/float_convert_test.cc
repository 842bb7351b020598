#include "meshlayout/init/float_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace meshlayout {
namespace {

// Independent reference: the nearer of the two 16-bit neighbours of f, ties to the even one,
// decided in double arithmetic (exact for these differences).
uint16_t reference_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t down = static_cast<uint16_t>(x >> 16);  // truncation: towards zero
  const uint16_t up = static_cast<uint16_t>(down + 1);   // next away from zero
  const double d = std::fabs(static_cast<double>(f) - float_from_bf16(down));
  const float up_value = float_from_bf16(up);
  const double u = std::isinf(up_value) && !std::isinf(f)
                       ? std::ldexp(1.0, 128) - std::fabs(static_cast<double>(f))
                       : std::fabs(static_cast<double>(up_value) - f);
  if (d < u) return down;
  if (u < d) return up;
  return (down & 1) ? up : down;
}

TEST(FloatConvertTest, KnownValues) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(-2.0f), 0xC000);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(float_from_bf16(bf16_from_float(std::nanf("")))));

  EXPECT_EQ(f16_from_float(1.0f), 0x3C00);
  EXPECT_EQ(f16_from_float(-1.5f), 0xBE00);
  EXPECT_EQ(f16_from_float(65504.0f), 0x7BFF);  // largest half
  EXPECT_EQ(f16_from_float(65519.99f), 0x7BFF);
  EXPECT_EQ(f16_from_float(65520.0f), 0x7C00);  // halfway to 65536: to infinity
  EXPECT_EQ(f16_from_float(1e30f), 0x7C00);
  EXPECT_EQ(f16_from_float(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(f16_from_float(0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(f16_from_float(0x1p-24f), 0x0001);    // smallest subnormal
  EXPECT_EQ(f16_from_float(0x1p-25f), 0x0000);    // tie between 0 and 2^-24: even (0)
  EXPECT_EQ(f16_from_float(0x1.8p-24f), 0x0002);  // tie between 1 and 2 steps: even (2)
  EXPECT_EQ(f16_from_float(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(f16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(f16_from_float(std::nanf("")) & 0x7E00, 0x7E00);
  EXPECT_EQ(float_from_f16(0x0001), 0x1p-24f);
  EXPECT_EQ(float_from_f16(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(float_from_f16(0xFC00)));
  EXPECT_TRUE(std::isnan(float_from_f16(0x7E00)));
}

TEST(FloatConvertTest, EveryHalfAndBfloatRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f16 = float_from_f16(bits), b16 = float_from_bf16(bits);
    if (!std::isnan(f16)) {
      ASSERT_EQ(f16_from_float(f16), bits) << std::hex << h;
    }
    if (!std::isnan(b16)) {
      ASSERT_EQ(bf16_from_float(b16), bits) << std::hex << h;
    }
  }
}

// Midpoints between neighbouring halves (exact in float) go to the even one; one float ulp
// off a midpoint goes to the nearer one. Covers subnormals, the normal range and overflow.
TEST(FloatConvertTest, HalfMidpointsRoundToNearestEven) {
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float lo = float_from_f16(static_cast<uint16_t>(h));
    const float hi = h == 0x7BFF ? 65536.0f : float_from_f16(static_cast<uint16_t>(h + 1));
    const float mid = (lo + hi) / 2;  // exact: 12 significant bits
    const uint16_t up = static_cast<uint16_t>(h + 1);
    const uint16_t even = (h & 1) ? up : static_cast<uint16_t>(h);
    ASSERT_EQ(f16_from_float(mid), even) << std::hex << h;
    ASSERT_EQ(f16_from_float(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(f16_from_float(std::nextafter(mid, 1e9f)), up) << std::hex << h;
    ASSERT_EQ(f16_from_float(-mid), even | 0x8000) << std::hex << h;
  }
}

TEST(FloatConvertTest, BfloatMatchesReferenceOnRandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16_from_float(f), reference_bf16(f)) << std::hexfloat << f;
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t hardware_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

bool has_f16c() {  // CPUID.1:ECX bit 29; F16C is VEX-encoded, so the OS must enable AVX too
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0 &&
         __builtin_cpu_supports("avx");
}

TEST(FloatConvertTest, HalfMatchesF16cOnRandomFloats) {
  if (!has_f16c()) GTEST_SKIP() << "the CPU has no F16C";
  std::mt19937 rng(11);
  for (int i = 0; i < 4'000'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f16_from_float(f), hardware_f16(f)) << std::hexfloat << f;
  }
  for (uint32_t x = 0x33000000u; x < 0x38800000u; x += 97) {  // the subnormal range, densely
    const float f = std::bit_cast<float>(x);
    ASSERT_EQ(f16_from_float(f), hardware_f16(f)) << std::hexfloat << f;
  }
}
#endif

}  // namespace
}  // namespace meshlayout
