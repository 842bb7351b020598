// philox_lanes.h — the vector operations one Philox round needs, per instruction set
// (internal to the init module; included by fill_kernels.cc only).
//
// A lane type `Ops` holds kLanes 32-bit words in a V and provides:
//   splat(x)                   every lane = x
//   iota(base)                 lane i = base + i (mod 2^32)
//   load(p)                    unaligned load of kLanes words
//   mulhilo(a, m, hi, lo)      per lane: hi:lo = a * m as a 64-bit product (m from splat)
//   xor3(a, b, c)              a ^ b ^ c
//   store(p, v)                unaligned store of kLanes words
// Philox needs 32x32->64 products; x86 has them on even lanes only (pmuludq), so mulhilo runs
// the even and odd lanes separately and blends the halves back.
//
// Example:
//   Avx2Lanes::V a = Avx2Lanes::iota(100), hi, lo;          // 100 … 107
//   Avx2Lanes::mulhilo(a, Avx2Lanes::splat(kPhiloxM0), hi, lo);
// IWYU pragma: private
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace meshlayout::internal_init {

#define MESHLAYOUT_LANES_INLINE __attribute__((always_inline)) inline

/// Plain C++ (any CPU): 8 lanes in an array; compilers vectorise it where they can.
struct PortableLanes {
  static constexpr size_t kLanes = 8;
  struct V {
    uint32_t w[kLanes];
  };
  static MESHLAYOUT_LANES_INLINE V splat(uint32_t x) {
    V v;
    for (size_t i = 0; i < kLanes; ++i) v.w[i] = x;
    return v;
  }
  static MESHLAYOUT_LANES_INLINE V iota(uint32_t base) {
    V v;
    for (size_t i = 0; i < kLanes; ++i) v.w[i] = base + static_cast<uint32_t>(i);
    return v;
  }
  static MESHLAYOUT_LANES_INLINE V load(const uint32_t* p) {
    V v;
    for (size_t i = 0; i < kLanes; ++i) v.w[i] = p[i];
    return v;
  }
  static MESHLAYOUT_LANES_INLINE void mulhilo(V a, V m, V& hi, V& lo) {
    for (size_t i = 0; i < kLanes; ++i) {
      const uint64_t p = uint64_t{a.w[i]} * m.w[i];
      hi.w[i] = static_cast<uint32_t>(p >> 32);
      lo.w[i] = static_cast<uint32_t>(p);
    }
  }
  static MESHLAYOUT_LANES_INLINE V xor3(V a, V b, V c) {
    for (size_t i = 0; i < kLanes; ++i) a.w[i] ^= b.w[i] ^ c.w[i];
    return a;
  }
  static MESHLAYOUT_LANES_INLINE void store(uint32_t* p, V v) {
    for (size_t i = 0; i < kLanes; ++i) p[i] = v.w[i];
  }
};

#if defined(__x86_64__)

/// SSE2, the x86-64 baseline: 4 lanes.
struct Sse2Lanes {
  static constexpr size_t kLanes = 4;
  using V = __m128i;
  static MESHLAYOUT_LANES_INLINE V splat(uint32_t x) { return _mm_set1_epi32(static_cast<int>(x)); }
  static MESHLAYOUT_LANES_INLINE V iota(uint32_t base) {
    return _mm_add_epi32(splat(base), _mm_setr_epi32(0, 1, 2, 3));
  }
  static MESHLAYOUT_LANES_INLINE V load(const uint32_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static MESHLAYOUT_LANES_INLINE void mulhilo(V a, V m, V& hi, V& lo) {
    const V even = _mm_mul_epu32(a, m);                     // products of lanes 0, 2
    const V odd = _mm_mul_epu32(_mm_srli_epi64(a, 32), m);  // products of lanes 1, 3
    const V low_half = _mm_set1_epi64x(0xFFFFFFFF);
    hi = _mm_or_si128(_mm_srli_epi64(even, 32), _mm_andnot_si128(low_half, odd));
    lo = _mm_or_si128(_mm_and_si128(even, low_half), _mm_slli_epi64(odd, 32));
  }
  static MESHLAYOUT_LANES_INLINE V xor3(V a, V b, V c) {
    return _mm_xor_si128(_mm_xor_si128(a, b), c);
  }
  static MESHLAYOUT_LANES_INLINE void store(uint32_t* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
  }
};

#define MESHLAYOUT_TARGET_AVX2 __attribute__((target("avx2")))

/// AVX2: 8 lanes.
struct Avx2Lanes {
  static constexpr size_t kLanes = 8;
  using V = __m256i;
  static MESHLAYOUT_TARGET_AVX2 MESHLAYOUT_LANES_INLINE V splat(uint32_t x) {
    return _mm256_set1_epi32(static_cast<int>(x));
  }
  static MESHLAYOUT_TARGET_AVX2 MESHLAYOUT_LANES_INLINE V iota(uint32_t base) {
    return _mm256_add_epi32(splat(base), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static MESHLAYOUT_TARGET_AVX2 MESHLAYOUT_LANES_INLINE V load(const uint32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  static MESHLAYOUT_TARGET_AVX2 MESHLAYOUT_LANES_INLINE void mulhilo(V a, V m, V& hi, V& lo) {
    const V even = _mm256_mul_epu32(a, m);
    const V odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  }
  static MESHLAYOUT_TARGET_AVX2 MESHLAYOUT_LANES_INLINE V xor3(V a, V b, V c) {
    return _mm256_xor_si256(_mm256_xor_si256(a, b), c);
  }
  static MESHLAYOUT_TARGET_AVX2 MESHLAYOUT_LANES_INLINE void store(uint32_t* p, V v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
};

#define MESHLAYOUT_TARGET_AVX512 __attribute__((target("avx512f")))

/// AVX-512F: 16 lanes.
struct Avx512Lanes {
  static constexpr size_t kLanes = 16;
  using V = __m512i;
  static MESHLAYOUT_TARGET_AVX512 MESHLAYOUT_LANES_INLINE V splat(uint32_t x) {
    return _mm512_set1_epi32(static_cast<int>(x));
  }
  static MESHLAYOUT_TARGET_AVX512 MESHLAYOUT_LANES_INLINE V iota(uint32_t base) {
    return _mm512_add_epi32(
        splat(base), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  static MESHLAYOUT_TARGET_AVX512 MESHLAYOUT_LANES_INLINE V load(const uint32_t* p) {
    return _mm512_loadu_si512(p);
  }
  // The maskz forms with every lane selected are the plain instructions; g++ 12 warns
  // (-Wmaybe-uninitialized, GCC bug 105593) on the plain intrinsics' undefined pass-through.
  static MESHLAYOUT_TARGET_AVX512 MESHLAYOUT_LANES_INLINE void mulhilo(V a, V m, V& hi, V& lo) {
    const __mmask8 all = 0xFF;
    const V even = _mm512_maskz_mul_epu32(all, a, m);
    const V odd = _mm512_maskz_mul_epu32(all, _mm512_maskz_srli_epi64(all, a, 32), m);
    hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_maskz_srli_epi64(all, even, 32), odd);
    lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_maskz_slli_epi64(all, odd, 32));
  }
  static MESHLAYOUT_TARGET_AVX512 MESHLAYOUT_LANES_INLINE V xor3(V a, V b, V c) {
    return _mm512_ternarylogic_epi32(a, b, c, 0x96);  // 0x96: a ^ b ^ c
  }
  static MESHLAYOUT_TARGET_AVX512 MESHLAYOUT_LANES_INLINE void store(uint32_t* p, V v) {
    _mm512_storeu_si512(p, v);
  }
};

#endif  // __x86_64__

}  // namespace meshlayout::internal_init
