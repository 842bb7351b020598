// fill_kernels_impl.h — the body of the fill kernels, compiled once per SimdLevel
// (internal to the init module). fill_kernels.cc includes this file several times, each time
// defining
//   MESHLAYOUT_KERNEL_NS      the namespace of this copy (portable, sse2, avx2, avx512)
//   MESHLAYOUT_KERNEL_LANES   its lane type from philox_lanes.h
//   MESHLAYOUT_KERNEL_TARGET  the target attribute every function of the copy carries
// Only the Philox rounds use the lane type; the transforms are plain loops that the compiler
// vectorises for the copy's target. Functions from other headers (sampling_math.h,
// float_convert.h) are always_inline, so they are compiled into each copy.
//
// Example (fill_kernels.cc):
//   #define MESHLAYOUT_KERNEL_NS avx2
//   #define MESHLAYOUT_KERNEL_LANES Avx2Lanes
//   #define MESHLAYOUT_KERNEL_TARGET MESHLAYOUT_TARGET_AVX2
//   #include "meshlayout/init/fill_kernels_impl.h"
// IWYU pragma: private
// No include guard: included once per SimdLevel on purpose.

namespace meshlayout::internal_init::MESHLAYOUT_KERNEL_NS {

using Lanes = MESHLAYOUT_KERNEL_LANES;
using V = Lanes::V;
constexpr size_t kLanes = Lanes::kLanes;
constexpr int kGroup = 4;                    // independent vectors per round: hides latency
constexpr size_t kChunk = 512;               // elements per pass (the buffers stay in L1)
constexpr size_t kPadded = kChunk + kLanes;  // room for the rounded-up last vector

/// Shortcuts that keep the results bit-identical:
///   zero_high  counter words 2 and 3 are 0, so round 1's second product is 0;
///   low_words  only output words 0 and 1 are used, so round 10's first product is not
///              needed (words 2 and 3 are left unfinished).
struct RoundOptions {
  bool zero_high = false;
  bool low_words = false;
};

/// The 10 Philox rounds on G vectors of counters, in place.
template <int G, RoundOptions kOptions = RoundOptions{}>
MESHLAYOUT_KERNEL_TARGET MESHLAYOUT_LANES_INLINE void philox_rounds(V (&a)[G], V (&b)[G], V (&c)[G],
                                                                    V (&d)[G], uint32_t k0,
                                                                    uint32_t k1) {
  const V m0 = Lanes::splat(kPhiloxM0), m1 = Lanes::splat(kPhiloxM1);
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    const V key0 = Lanes::splat(k0), key1 = Lanes::splat(k1);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      V hi0 = a[g], lo0 = a[g], hi1 = c[g], lo1 = c[g];
      if (kOptions.zero_high && round == 0) {  // c = d = 0: hi1 = lo1 = 0
        Lanes::mulhilo(a[g], m0, hi0, lo0);
        a[g] = Lanes::xor3(b[g], key0, Lanes::splat(0));
        b[g] = Lanes::splat(0);
        c[g] = Lanes::xor3(hi0, key1, Lanes::splat(0));
        d[g] = lo0;
      } else if (kOptions.low_words && round == 9) {  // c, d of the last round are unused
        Lanes::mulhilo(c[g], m1, hi1, lo1);
        a[g] = Lanes::xor3(hi1, b[g], key0);
        b[g] = lo1;
      } else {
        Lanes::mulhilo(a[g], m0, hi0, lo0);
        Lanes::mulhilo(c[g], m1, hi1, lo1);
        a[g] = Lanes::xor3(hi1, b[g], key0);
        b[g] = lo1;
        c[g] = Lanes::xor3(hi0, d[g], key1);
        d[g] = lo0;
      }
    }
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

template <int G>
MESHLAYOUT_KERNEL_TARGET MESHLAYOUT_LANES_INLINE void store_blocks(size_t at, const V (&a)[G],
                                                                   const V (&b)[G], const V (&c)[G],
                                                                   const V (&d)[G], uint32_t* w0,
                                                                   uint32_t* w1, uint32_t* w2,
                                                                   uint32_t* w3) {
  for (int g = 0; g < G; ++g) {
    const size_t i = at + static_cast<size_t>(g) * kLanes;
    Lanes::store(w0 + i, a[g]);
    Lanes::store(w1 + i, b[g]);
    Lanes::store(w2 + i, c[g]);
    Lanes::store(w3 + i, d[g]);
  }
}

/// Blocks of `groups * G * kLanes` counters (lo + i, c1, c2, c3), lo + i modulo 2^32.
template <int G, RoundOptions kOptions>
MESHLAYOUT_KERNEL_TARGET MESHLAYOUT_LANES_INLINE void philox_groups(
    uint32_t k0, uint32_t k1, uint32_t lo, uint32_t c1, uint32_t c2, uint32_t c3, size_t groups,
    uint32_t* w0, uint32_t* w1, uint32_t* w2, uint32_t* w3) {
  for (size_t group = 0; group < groups; ++group) {
    V a[G], b[G], c[G], d[G];
    for (int g = 0; g < G; ++g) {
      a[g] = Lanes::iota(lo + static_cast<uint32_t>((group * G + g) * kLanes));
      b[g] = Lanes::splat(c1);
      c[g] = Lanes::splat(c2);
      d[g] = Lanes::splat(c3);
    }
    philox_rounds<G, kOptions>(a, b, c, d, k0, k1);
    store_blocks<G>(group * G * kLanes, a, b, c, d, w0, w1, w2, w3);
  }
}

/// Blocks of the counters (c0[j], c1[j], c2, c3), j < n; may write up to kLanes - 1 more.
/// \pre c0 and c1 hold n rounded up to kLanes words.
MESHLAYOUT_KERNEL_TARGET inline void philox_list(uint64_t key, const uint32_t* c0,
                                                 const uint32_t* c1, uint64_t high, size_t n,
                                                 uint32_t* w0, uint32_t* w1, uint32_t* w2,
                                                 uint32_t* w3) {
  const uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (size_t at = 0; at < n; at += kLanes) {
    V a[1] = {Lanes::load(c0 + at)}, b[1] = {Lanes::load(c1 + at)};
    V c[1] = {Lanes::splat(static_cast<uint32_t>(high))};
    V d[1] = {Lanes::splat(static_cast<uint32_t>(high >> 32))};
    philox_rounds<1>(a, b, c, d, k0, k1);
    store_blocks<1>(at, a, b, c, d, w0, w1, w2, w3);
  }
}

/// philox_padded() for one choice of RoundOptions.
template <RoundOptions kOptions>
MESHLAYOUT_KERNEL_TARGET inline void philox_segments(uint64_t key, uint64_t first, uint64_t high,
                                                     size_t n, uint32_t* w0, uint32_t* w1,
                                                     uint32_t* w2, uint32_t* w3) {
  const uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  const uint32_t c2 = static_cast<uint32_t>(high), c3 = static_cast<uint32_t>(high >> 32);
  size_t done = 0;
  while (done < n) {
    // Lanes step the low counter word only, so cut the run where it wraps (c1 changes).
    const uint64_t g = first + done;
    const uint32_t lo = static_cast<uint32_t>(g), c1 = static_cast<uint32_t>(g >> 32);
    const uint64_t room = (uint64_t{1} << 32) - lo;
    const size_t seg = static_cast<size_t>(room < n - done ? room : n - done);
    const size_t big = seg / (kGroup * kLanes);
    philox_groups<kGroup, kOptions>(k0, k1, lo, c1, c2, c3, big, w0 + done, w1 + done, w2 + done,
                                    w3 + done);
    const size_t at = done + big * kGroup * kLanes;
    const size_t small = (done + seg - at + kLanes - 1) / kLanes;
    philox_groups<1, kOptions>(k0, k1, lo + static_cast<uint32_t>(at - done), c1, c2, c3, small,
                               w0 + at, w1 + at, w2 + at, w3 + at);
    done += seg;
  }
}

/// Blocks of counters philox_counter(first + i, high), i < n, to w*[i]; may write up to
/// kLanes - 1 more elements past n (the rest of the last vector). With kLowWords, words 2
/// and 3 are left unfinished.
template <bool kLowWords = false>
MESHLAYOUT_KERNEL_TARGET inline void philox_padded(uint64_t key, uint64_t first, uint64_t high,
                                                   size_t n, uint32_t* w0, uint32_t* w1,
                                                   uint32_t* w2, uint32_t* w3) {
  if (high == 0) {
    philox_segments<RoundOptions{.zero_high = true, .low_words = kLowWords}>(key, first, 0, n, w0,
                                                                             w1, w2, w3);
  } else {
    philox_segments<RoundOptions{.low_words = kLowWords}>(key, first, high, n, w0, w1, w2, w3);
  }
}

MESHLAYOUT_KERNEL_TARGET void philox_blocks(uint64_t key, uint64_t first, uint64_t high, size_t n,
                                            const PhiloxWords& words) {
  alignas(64) uint32_t w[4][kPadded];
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t m = n - done < kChunk ? n - done : kChunk;
    philox_padded(key, first + done, high, m, w[0], w[1], w[2], w[3]);
    for (int j = 0; j < 4; ++j) std::memcpy(words[j] + done, w[j], m * sizeof(uint32_t));
  }
}

/// Positions i < m with !(|z[i]| <= bound), in order, to `bad`; returns their count.
template <class T>
MESHLAYOUT_KERNEL_TARGET inline size_t rejected(const T* z, size_t m, T bound, uint16_t* bad) {
  alignas(64) uint8_t flag[kChunk];
  for (size_t i = 0; i < m; ++i) flag[i] = !(std::fabs(z[i]) <= bound);  // vectorised
  size_t n = 0, i = 0;
  for (; i + 8 <= m; i += 8) {  // ~70% of 8-element words hold no rejection
    uint64_t word;
    std::memcpy(&word, flag + i, sizeof(word));
    for (; word != 0; word &= word - 1) {
      bad[n++] = static_cast<uint16_t>(i + static_cast<size_t>(std::countr_zero(word)) / 8);
    }
  }
  for (; i < m; ++i) {
    if (flag[i]) bad[n++] = static_cast<uint16_t>(i);
  }
  return n;
}

/// Redraws the rejected standard normals of a chunk starting at global index `first`:
/// attempt a = 1, 2, … uses counters philox_counter(g, a), all rejected elements at once.
template <class T>
MESHLAYOUT_KERNEL_TARGET inline void redraw_rejected(uint64_t key, uint64_t first, size_t m, T* z) {
  constexpr T kBound = static_cast<T>(kTruncationBound);
  alignas(64) uint16_t bad[kChunk];
  alignas(64) uint32_t c0[kPadded], c1[kPadded], w[4][kPadded];
  alignas(64) T redrawn[kPadded];
  size_t n = rejected(z, m, kBound, bad);
  for (uint64_t attempt = 1; n > 0; ++attempt) {
    for (size_t j = 0; j < n; ++j) {
      const uint64_t g = first + bad[j];
      c0[j] = static_cast<uint32_t>(g);
      c1[j] = static_cast<uint32_t>(g >> 32);
    }
    for (size_t j = n; j % kLanes != 0; ++j) c0[j] = c1[j] = 0;  // the last vector's tail
    philox_list(key, c0, c1, attempt, n, w[0], w[1], w[2], w[3]);
    for (size_t j = 0; j < n; ++j) {
      if constexpr (sizeof(T) == sizeof(float)) {
        redrawn[j] = normal_float(w[0][j], w[1][j]);
      } else {
        redrawn[j] = normal_double(w[0][j], w[1][j], w[2][j], w[3][j]);
      }
    }
    size_t still = 0;
    for (size_t j = 0; j < n; ++j) {
      const bool ok = std::fabs(redrawn[j]) <= kBound;
      z[bad[j]] = ok ? redrawn[j] : z[bad[j]];
      bad[still] = bad[j];
      still += !ok;
    }
    n = still;
  }
}

/// Values of the chunk as floats: uniform, or mean + stddev * z.
MESHLAYOUT_KERNEL_TARGET inline void sample_floats(const SamplerSpec& s, uint64_t first, size_t m,
                                                   const uint32_t* w0, const uint32_t* w1,
                                                   float* v) {
  if (s.sampler == Sampler::kUniform) {
    const float lo = static_cast<float>(s.a), span = static_cast<float>(s.b - s.a);
    for (size_t i = 0; i < m; ++i) v[i] = lo + span * unit_float(w0[i]);
    return;
  }
  const float mean = static_cast<float>(s.a), stddev = static_cast<float>(s.b);
  for (size_t i = 0; i < m; ++i) v[i] = normal_float(w0[i], w1[i]);
  if (s.sampler == Sampler::kTruncatedNormal) redraw_rejected(s.key, first, m, v);
  for (size_t i = 0; i < m; ++i) v[i] = mean + stddev * v[i];
}

/// Values of the chunk as doubles.
MESHLAYOUT_KERNEL_TARGET inline void sample_doubles(const SamplerSpec& s, uint64_t first, size_t m,
                                                    const uint32_t* const* w, double* v) {
  if (s.sampler == Sampler::kUniform) {
    const double lo = s.a, span = s.b - s.a;
    for (size_t i = 0; i < m; ++i) v[i] = lo + span * unit_double(w[0][i], w[1][i]);
    return;
  }
  for (size_t i = 0; i < m; ++i) v[i] = normal_double(w[0][i], w[1][i], w[2][i], w[3][i]);
  if (s.sampler == Sampler::kTruncatedNormal) redraw_rejected(s.key, first, m, v);
  for (size_t i = 0; i < m; ++i) v[i] = s.a + s.b * v[i];
}

MESHLAYOUT_KERNEL_TARGET void fill_run(const SamplerSpec& s, uint64_t first, size_t n,
                                       std::byte* out) {
  alignas(64) uint32_t w[4][kPadded];
  alignas(64) float vf[kChunk];
  alignas(64) double vd[kChunk];
  alignas(64) uint16_t half[kChunk];
  const uint32_t* const words[4] = {w[0], w[1], w[2], w[3]};
  // Every sampler but the F64 normals reads words 0 and 1 only.
  const bool low_words = !(s.dtype == DType::kF64 && s.sampler != Sampler::kUniform);
  for (size_t done = 0; done < n; done += kChunk) {
    const size_t m = n - done < kChunk ? n - done : kChunk;
    const uint64_t g = first + done;
    if (low_words) {
      philox_padded<true>(s.key, g, 0, m, w[0], w[1], w[2], w[3]);
    } else {
      philox_padded<false>(s.key, g, 0, m, w[0], w[1], w[2], w[3]);
    }
    switch (s.dtype) {
      case DType::kF64:
        sample_doubles(s, g, m, words, vd);
        std::memcpy(out + done * sizeof(double), vd, m * sizeof(double));
        break;
      case DType::kF32:
        sample_floats(s, g, m, w[0], w[1], vf);
        std::memcpy(out + done * sizeof(float), vf, m * sizeof(float));
        break;
      case DType::kBF16:
        sample_floats(s, g, m, w[0], w[1], vf);
        for (size_t i = 0; i < m; ++i) half[i] = bf16_from_float(vf[i]);
        std::memcpy(out + done * sizeof(uint16_t), half, m * sizeof(uint16_t));
        break;
      case DType::kF16:
        sample_floats(s, g, m, w[0], w[1], vf);
        for (size_t i = 0; i < m; ++i) half[i] = f16_from_float(vf[i]);
        std::memcpy(out + done * sizeof(uint16_t), half, m * sizeof(uint16_t));
        break;
      default:
        return;  // excluded by the precondition; fill_box checks it
    }
  }
}

}  // namespace meshlayout::internal_init::MESHLAYOUT_KERNEL_NS
