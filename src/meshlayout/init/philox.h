// philox.h — Philox4x32-10, the counter-based generator every random initializer draws from.
//
// Philox4x32-10 (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011) maps a 64-bit key and a 128-bit counter to four 32-bit words through 10 rounds of
// multiply-high/xor. It is a pure function: no state, so any device can compute the words of any
// counter, which is what makes an initialisation independent of the mesh (DESIGN §2 "Lazy
// init"). The constants are those of Random123, cuRAND, TensorFlow and JAX, and the results
// match Random123's known-answer vectors (tests/kat_vectors) bit for bit.
//
// Words are numbered as Random123 numbers them: key = {k0, k1}, counter = {c0, c1, c2, c3}.
// The 64-bit forms put the low half first: philox_key(0x299f31d0'a4093822) == {0xa4093822,
// 0x299f31d0}.
//
// Example:
//   PhiloxBlock r = philox4x32_10({0, 0, 0, 0}, {0, 0});   // {0x6627e8d5, 0xe169c58d, …}
//   // 1000 blocks, counters (7 + i, 0, 0, 0), vectorised (AVX-512 / AVX2 / SSE2):
//   philox4x32_10_blocks(key, 7, 0, 1000, {w0, w1, w2, w3});
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace meshlayout {

using PhiloxKey = std::array<uint32_t, 2>;
using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxBlock = std::array<uint32_t, 4>;

/// Round multipliers and key increments (Weyl constants), as in Random123 `philox.h`.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

/// {low 32 bits, high 32 bits} of a 64-bit key.
constexpr PhiloxKey philox_key(uint64_t key) {
  return {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
}

/// Counter {lo32(low), hi32(low), lo32(high), hi32(high)} of a 128-bit value `high:low`.
constexpr PhiloxCounter philox_counter(uint64_t low, uint64_t high = 0) {
  return {static_cast<uint32_t>(low), static_cast<uint32_t>(low >> 32), static_cast<uint32_t>(high),
          static_cast<uint32_t>(high >> 32)};
}

/// One Philox4x32-10 block: the four words for `counter` under `key`.
constexpr PhiloxBlock philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kPhiloxM0} * counter[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ k0, static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return counter;
}

/// Where philox4x32_10_blocks() writes: word j of block i goes to `words[j][i]`.
using PhiloxWords = std::array<uint32_t*, 4>;

/// The blocks of the `n` consecutive counters philox_counter(first + i, high) for
/// i in [0, n), under `key` (the low 64 bits wrap modulo 2^64). Same values as n calls of
/// philox4x32_10(), computed 4, 8 or 16 at a time with the widest vector unit of the CPU.
/// \pre every `words[j]` holds at least `n` elements.
void philox4x32_10_blocks(uint64_t key, uint64_t first, uint64_t high, size_t n,
                          const PhiloxWords& words);

}  // namespace meshlayout
