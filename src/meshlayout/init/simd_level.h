// simd_level.h — which vector unit the init kernels use (internal to the init module).
//
// The Philox rounds need 32x32->64-bit multiplies that compilers do not auto-vectorise well
// (measured with g++ 12: plain arrays reach ~0.9 GB/s even with -march=x86-64-v3), so
// fill_kernels.cc carries one copy of each kernel per x86 level, compiled with a target
// attribute, and picks the widest one the CPU supports at run time. Every level computes the
// same bits (integer Philox; float transforms without contraction), which the tests check.
//
// Example:
//   SimdLevel l = best_simd_level();        // kAvx512 on a Zen 4 / Skylake-SP, else kAvx2 …
//   simd_level_name(l);                      // "avx512"
// IWYU pragma: private, include "meshlayout/init/initializers.h"
#pragma once

#include <string_view>
#include <vector>

namespace meshlayout::internal_init {

/// kPortable: plain C++ (any CPU). kSse2: x86-64 baseline. kAvx2, kAvx512 (AVX-512F).
enum class SimdLevel { kPortable, kSse2, kAvx2, kAvx512 };

/// "portable", "sse2", "avx2", "avx512".
std::string_view simd_level_name(SimdLevel level);

/// True if this build carries kernels for `level` and the CPU (and OS) can run them.
bool simd_level_supported(SimdLevel level);

/// Every supported level, narrowest first (always starts with kPortable).
std::vector<SimdLevel> supported_simd_levels();

/// The widest supported level, detected once.
SimdLevel best_simd_level();

}  // namespace meshlayout::internal_init
