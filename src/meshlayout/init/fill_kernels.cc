#include "meshlayout/init/fill_kernels.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/init/philox_lanes.h"
#include "meshlayout/init/sampling_math.h"

// One copy of the kernels per SimdLevel; see fill_kernels_impl.h.
#define MESHLAYOUT_KERNEL_NS portable
#define MESHLAYOUT_KERNEL_LANES PortableLanes
#define MESHLAYOUT_KERNEL_TARGET
#include "meshlayout/init/fill_kernels_impl.h"  // NOLINT(build/include)
#undef MESHLAYOUT_KERNEL_NS
#undef MESHLAYOUT_KERNEL_LANES
#undef MESHLAYOUT_KERNEL_TARGET

#if defined(__x86_64__)
#define MESHLAYOUT_KERNEL_NS sse2
#define MESHLAYOUT_KERNEL_LANES Sse2Lanes
#define MESHLAYOUT_KERNEL_TARGET
#include "meshlayout/init/fill_kernels_impl.h"  // NOLINT(build/include)
#undef MESHLAYOUT_KERNEL_NS
#undef MESHLAYOUT_KERNEL_LANES
#undef MESHLAYOUT_KERNEL_TARGET

#define MESHLAYOUT_KERNEL_NS avx2
#define MESHLAYOUT_KERNEL_LANES Avx2Lanes
#define MESHLAYOUT_KERNEL_TARGET MESHLAYOUT_TARGET_AVX2
#include "meshlayout/init/fill_kernels_impl.h"  // NOLINT(build/include)
#undef MESHLAYOUT_KERNEL_NS
#undef MESHLAYOUT_KERNEL_LANES
#undef MESHLAYOUT_KERNEL_TARGET

#define MESHLAYOUT_KERNEL_NS avx512
#define MESHLAYOUT_KERNEL_LANES Avx512Lanes
#define MESHLAYOUT_KERNEL_TARGET MESHLAYOUT_TARGET_AVX512
#include "meshlayout/init/fill_kernels_impl.h"  // NOLINT(build/include)
#undef MESHLAYOUT_KERNEL_NS
#undef MESHLAYOUT_KERNEL_LANES
#undef MESHLAYOUT_KERNEL_TARGET
#endif  // __x86_64__

namespace meshlayout::internal_init {

void fill_run(SimdLevel level, const SamplerSpec& spec, uint64_t first, size_t n, std::byte* out) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512:
      return avx512::fill_run(spec, first, n, out);
    case SimdLevel::kAvx2:
      return avx2::fill_run(spec, first, n, out);
    case SimdLevel::kSse2:
      return sse2::fill_run(spec, first, n, out);
#endif
    case SimdLevel::kPortable:
      return portable::fill_run(spec, first, n, out);
    default:
      break;
  }
  throw InternalError("init kernels for this SIMD level are not built into this binary");
}

void philox_blocks(SimdLevel level, uint64_t key, uint64_t first, uint64_t high, size_t n,
                   const PhiloxWords& words) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512:
      return avx512::philox_blocks(key, first, high, n, words);
    case SimdLevel::kAvx2:
      return avx2::philox_blocks(key, first, high, n, words);
    case SimdLevel::kSse2:
      return sse2::philox_blocks(key, first, high, n, words);
#endif
    case SimdLevel::kPortable:
      return portable::philox_blocks(key, first, high, n, words);
    default:
      break;
  }
  throw InternalError("init kernels for this SIMD level are not built into this binary");
}

}  // namespace meshlayout::internal_init
