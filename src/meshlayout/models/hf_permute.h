// hf_permute.h — (internal to the HF checkpoint code) copying a row-major block through a
// dimension permutation, converting F32 / BF16 / F16 elements to F32 on the way.
//
// Example: a (3, 5) row-major F16 block to its (5, 3) transpose in F32:
//   const int perm[] = {1, 0};
//   const int64_t strides[] = {3, 1};
//   permute_to_f32(src, DType::kF16, {3, 5}, perm, dst, strides);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/shape.h"

namespace meshlayout::hf_internal {

/// Output element k (rank r, shape src_shape[perm[i]] along dim i) is written at
/// dst[sum k[i] * dst_strides[i]] from source element v with v[perm[i]] = k[i]. `src` is
/// row-major of `src_shape` in `src_dtype` (F32, BF16 or F16; ValueError otherwise).
void permute_to_f32(const std::byte* src, DType src_dtype, const Shape& src_shape,
                    std::span<const int> perm, float* dst, std::span<const int64_t> dst_strides);

/// Row-major strides (in elements) of `shape`.
std::vector<int64_t> row_major_strides(const Shape& shape);

}  // namespace meshlayout::hf_internal
