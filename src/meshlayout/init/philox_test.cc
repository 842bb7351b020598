#include "meshlayout/init/philox.h"

#include <gtest/gtest.h>

#include <bit>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "meshlayout/init/fill_kernels.h"
#include "meshlayout/init/simd_level.h"

namespace meshlayout {
namespace {

using internal_init::SimdLevel;

// Random123 tests/kat_vectors, the three "philox4x32 10" lines (columns: ctr[4] key[2] ->
// result[4]). TensorFlow's XLA Philox test checks the same three vectors.
struct Kat {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxBlock expected;
};
constexpr Kat kKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

static_assert(philox4x32_10(kKats[1].counter, kKats[1].key) == kKats[1].expected);

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  for (const Kat& kat : kKats) {
    EXPECT_EQ(philox4x32_10(kat.counter, kat.key), kat.expected);
  }
}

TEST(PhiloxTest, SixtyFourBitFormsPutTheLowHalfFirst) {
  EXPECT_EQ(philox_key(0x299f31d0a4093822u), (PhiloxKey{0xa4093822, 0x299f31d0}));
  EXPECT_EQ(philox_counter(0x85a308d3243f6a88u, 0x0370734413198a2eu), kKats[2].counter);
  EXPECT_EQ(philox_counter(5), (PhiloxCounter{5, 0, 0, 0}));
}

std::vector<PhiloxBlock> scalar_blocks(uint64_t key, uint64_t first, uint64_t high, size_t n) {
  std::vector<PhiloxBlock> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(philox4x32_10(philox_counter(first + i, high), philox_key(key)));
  }
  return out;
}

std::vector<PhiloxBlock> bulk_blocks(SimdLevel level, uint64_t key, uint64_t first, uint64_t high,
                                     size_t n) {
  std::vector<uint32_t> w(4 * n + 1, 0xDEADBEEF);  // + 1: a guard word
  internal_init::philox_blocks(level, key, first, high, n,
                               {w.data(), w.data() + n, w.data() + 2 * n, w.data() + 3 * n});
  EXPECT_EQ(w.back(), 0xDEADBEEFu) << "wrote past the end";
  std::vector<PhiloxBlock> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = {w[i], w[n + i], w[2 * n + i], w[3 * n + i]};
  return out;
}

// Every vector width gives the scalar blocks, across the low-word wrap at 2^32 and the
// 2^64 wrap, for lengths that exercise whole groups, single vectors and partial vectors.
TEST(PhiloxTest, EverySimdLevelMatchesScalar) {
  const uint64_t firsts[] = {
      0, 1, 1000, (uint64_t{1} << 32) - 37, (uint64_t{7} << 32) - 1, ~uint64_t{0} - 20};
  const size_t lengths[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 200, 511, 512, 513, 1500};
  for (SimdLevel level : internal_init::supported_simd_levels()) {
    SCOPED_TRACE(std::string(internal_init::simd_level_name(level)));
    for (uint64_t first : firsts) {
      for (size_t n : lengths) {
        for (uint64_t high : {uint64_t{0}, uint64_t{0x0123456789ABCDEFu}}) {
          ASSERT_EQ(bulk_blocks(level, 0x9E3779B97F4A7C15u, first, high, n),
                    scalar_blocks(0x9E3779B97F4A7C15u, first, high, n))
              << "first " << first << " n " << n << " high " << high;
        }
      }
    }
  }
}

TEST(PhiloxTest, PublicBulkFunctionUsesTheBestLevel) {
  const size_t n = 777;
  std::vector<uint32_t> w(4 * n);
  philox4x32_10_blocks(42, 5, 0, n, {w.data(), w.data() + n, w.data() + 2 * n, w.data() + 3 * n});
  const std::vector<PhiloxBlock> want = scalar_blocks(42, 5, 0, n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ((PhiloxBlock{w[i], w[n + i], w[2 * n + i], w[3 * n + i]}), want[i]) << i;
  }
  std::cout << "init kernels use SIMD level "
            << internal_init::simd_level_name(internal_init::best_simd_level()) << "\n";
}

TEST(PhiloxTest, SupportedLevelsStartPortableAndEndWithTheBest) {
  const auto levels = internal_init::supported_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), SimdLevel::kPortable);
  EXPECT_EQ(levels.back(), internal_init::best_simd_level());
  EXPECT_EQ(internal_init::simd_level_name(SimdLevel::kAvx512), "avx512");
}

// A weak avalanche check: flipping one counter or key bit changes about half the output bits.
TEST(PhiloxTest, OneBitChangesAboutHalfTheOutput) {
  std::mt19937_64 rng(3);
  double total = 0;
  int trials = 0;
  for (int t = 0; t < 200; ++t) {
    const uint64_t key = rng(), ctr = rng();
    const PhiloxBlock base = philox4x32_10(philox_counter(ctr), philox_key(key));
    for (int bit = 0; bit < 64; ++bit) {
      const PhiloxBlock a =
          philox4x32_10(philox_counter(ctr ^ (uint64_t{1} << bit)), philox_key(key));
      const PhiloxBlock b =
          philox4x32_10(philox_counter(ctr), philox_key(key ^ (uint64_t{1} << bit)));
      for (int j = 0; j < 4; ++j) {
        total += std::popcount(a[j] ^ base[j]) + std::popcount(b[j] ^ base[j]);
      }
      trials += 2;
    }
  }
  const double mean_flipped = total / trials;  // of 128 bits
  EXPECT_NEAR(mean_flipped, 64.0, 0.5);
}

}  // namespace
}  // namespace meshlayout
