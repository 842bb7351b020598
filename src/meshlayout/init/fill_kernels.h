// fill_kernels.h — the inner loops of fill_box() (internal to the init module): write the
// random values of a run of consecutive global element indices.
//
// Element g of a variable is a pure function of (key, g): Philox4x32-10 block
// philox_counter(g) under the key, turned into a value by sampling_math.h. A run is computed
// 512 elements at a time: Philox blocks for the whole chunk into word arrays (vector code, one
// version per SimdLevel), then the transform into the dtype (plain loops, vectorised by the
// compiler). Truncated normals redraw the elements beyond 2 stddev (4.55%) from counters
// philox_counter(g, attempt), attempt = 1, 2, … — the element's own stream, so the result
// never depends on which run or device computed it; the redraws of a chunk are batched
// through the same vector code.
//
// Example:
//   SamplerSpec s{.sampler = Sampler::kNormal, .dtype = DType::kBF16, .a = 0, .b = 0.02,
//                 .key = key};
//   fill_run(best_simd_level(), s, /*first=*/4096, /*n=*/1024, out);  // 2048 bytes
// IWYU pragma: private, include "meshlayout/init/initializers.h"
#pragma once

#include <cstddef>
#include <cstdint>

#include "meshlayout/core/dtype.h"
#include "meshlayout/init/philox.h"
#include "meshlayout/init/simd_level.h"

namespace meshlayout::internal_init {

enum class Sampler { kUniform, kNormal, kTruncatedNormal };

/// What to draw: `a + (b - a) * u` for kUniform (a = minval, b = maxval), `a + b * z` for
/// the normals (a = mean, b = stddev). Computed in float for F32, BF16 and F16, in double
/// for F64.
struct SamplerSpec {
  Sampler sampler = Sampler::kUniform;
  DType dtype = DType::kF32;
  double a = 0.0;
  double b = 1.0;
  uint64_t key = 0;
};

/// Truncated normals keep |z| <= 2 (Keras, TensorFlow: "more than two standard deviations
/// from the mean are discarded and re-drawn").
inline constexpr double kTruncationBound = 2.0;

/// Writes the `n` elements of global indices first … first + n - 1, row-major, to `out`.
/// \pre `spec.dtype` is F32, F64, BF16 or F16; simd_level_supported(level); `out` holds
/// n * dtype_size(spec.dtype) bytes (any alignment).
void fill_run(SimdLevel level, const SamplerSpec& spec, uint64_t first, size_t n, std::byte* out);

/// philox4x32_10_blocks() at a given level.
void philox_blocks(SimdLevel level, uint64_t key, uint64_t first, uint64_t high, size_t n,
                   const PhiloxWords& words);

}  // namespace meshlayout::internal_init
