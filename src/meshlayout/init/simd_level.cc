#include "meshlayout/init/simd_level.h"

namespace meshlayout::internal_init {

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable:
      return "portable";
    case SimdLevel::kSse2:
      return "sse2";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable:
      return true;
#if defined(__x86_64__)
    // __builtin_cpu_supports also checks that the OS saves the wide registers (XGETBV).
    case SimdLevel::kSse2:
      return true;
    case SimdLevel::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2");
    case SimdLevel::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f");
#else
    default:
      return false;
#endif
  }
  return false;
}

std::vector<SimdLevel> supported_simd_levels() {
  std::vector<SimdLevel> levels;
  for (SimdLevel l :
       {SimdLevel::kPortable, SimdLevel::kSse2, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (simd_level_supported(l)) levels.push_back(l);
  }
  return levels;
}

SimdLevel best_simd_level() {
  static const SimdLevel best = supported_simd_levels().back();
  return best;
}

}  // namespace meshlayout::internal_init
