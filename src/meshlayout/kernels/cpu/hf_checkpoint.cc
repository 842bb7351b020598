// cpu/hf_checkpoint.cc — the CPU implementation of kernels/hf_checkpoint.h, the loops moved
// unchanged from models/hf_llama_checkpoint.cc.
#include "meshlayout/kernels/hf_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"

namespace meshlayout {
namespace {

// Row-major strides (in elements) of `shape`.
std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d > 1; --d) strides[d - 2] = strides[d - 1] * shape[d - 1];
  return strides;
}

// The output's last dim `a` is contiguous in dst; the dim `b` that is the source's last one is
// contiguous in src. When they differ, each (b, a) plane is copied in square tiles so that
// both sides stay in cache (a transpose); the other dims are an odometer around it.
template <typename T, typename Load>
void permute_loop(const T* src, const Shape& src_shape, std::span<const int> perm, float* dst,
                  std::span<const int64_t> dst_strides, Load load) {
  const size_t rank = perm.size();
  if (rank == 0) {
    dst[0] = load(src[0]);
    return;
  }
  const std::vector<int64_t> src_row_major = row_major_strides(src_shape);
  Shape out(rank);
  std::vector<int64_t> src_strides(rank);
  size_t b = 0;
  for (size_t i = 0; i < rank; ++i) {
    out[i] = src_shape[static_cast<size_t>(perm[i])];
    src_strides[i] = src_row_major[static_cast<size_t>(perm[i])];
    if (out[i] == 0) return;
    if (static_cast<size_t>(perm[i]) == rank - 1) b = i;
  }
  const size_t a = rank - 1;
  constexpr int64_t kTile = 32;
  auto plane = [&](int64_t s, int64_t d) {
    if (a == b) {
      for (int64_t k = 0; k < out[a]; ++k) {
        dst[d + k * dst_strides[a]] = load(src[s + k * src_strides[a]]);
      }
      return;
    }
    for (int64_t b0 = 0; b0 < out[b]; b0 += kTile) {
      const int64_t b1 = std::min(out[b], b0 + kTile);
      for (int64_t a0 = 0; a0 < out[a]; a0 += kTile) {
        const int64_t a1 = std::min(out[a], a0 + kTile);
        for (int64_t ib = b0; ib < b1; ++ib) {
          const T* in = src + s + ib * src_strides[b];
          float* o = dst + d + ib * dst_strides[b];
          for (int64_t ia = a0; ia < a1; ++ia)
            o[ia * dst_strides[a]] = load(in[ia * src_strides[a]]);
        }
      }
    }
  };
  std::vector<size_t> outer;  // every dim but a and b
  for (size_t i = 0; i < rank; ++i) {
    if (i != a && i != b) outer.push_back(i);
  }
  std::vector<int64_t> index(outer.size(), 0);
  int64_t s = 0, d = 0;
  while (true) {
    plane(s, d);
    size_t k = outer.size();
    while (true) {
      if (k == 0) return;
      const size_t dim = outer[--k];
      if (++index[k] < out[dim]) {
        s += src_strides[dim];
        d += dst_strides[dim];
        break;
      }
      s -= (out[dim] - 1) * src_strides[dim];
      d -= (out[dim] - 1) * dst_strides[dim];
      index[k] = 0;
    }
  }
}

}  // namespace

void permute_to_f32_host(const std::byte* src, DType src_dtype, const Shape& src_shape,
                         std::span<const int> perm, float* dst,
                         std::span<const int64_t> dst_strides) {
  switch (src_dtype) {
    case DType::kF32:
      permute_loop(reinterpret_cast<const float*>(src), src_shape, perm, dst, dst_strides,
                   [](float v) { return v; });
      return;
    case DType::kBF16:
      permute_loop(reinterpret_cast<const uint16_t*>(src), src_shape, perm, dst, dst_strides,
                   float_from_bf16);
      return;
    case DType::kF16:
      permute_loop(reinterpret_cast<const uint16_t*>(src), src_shape, perm, dst, dst_strides,
                   float_from_f16);
      return;
    default:
      throw ValueError(fmt::format("cannot convert {} to F32 here: expected F32, BF16 or F16",
                                   dtype_name(src_dtype)));
  }
}

void shard_host_bytes_cpu(const ShardHostBytes& args) { *args.bytes = args.shard->buffer.data(); }

void hf_permute_into_shard_cpu(const HfPermuteIntoShard& args) {
  const Array::Shard& shard = *args.dst;
  const std::vector<int64_t> strides = row_major_strides(shard.box.shape);
  int64_t offset = 0;
  for (size_t i = 0; i < strides.size(); ++i) {
    offset += (args.region->offset[i] - shard.box.offset[i]) * strides[i];
  }
  float* dst = reinterpret_cast<float*>(args.dst->buffer.data()) + offset;
  permute_to_f32_host(args.staging, args.src_dtype, *args.view_shape, args.perm, dst, strides);
}

void copy_replica_shard_cpu(const CopyReplicaShard& args) {
  std::memcpy(args.dst->buffer.data(), args.src->buffer.data(), args.src->buffer.size());
}

void find_non_finite_cpu(const FindNonFinite& args) {
  *args.first = -1;
  const float* x = reinterpret_cast<const float*>(args.shard->buffer.data());
  const int64_t n = num_elements(args.shard->box.shape);
  bool all_finite = true;
  for (int64_t k = 0; k < n; ++k) all_finite &= std::isfinite(x[k]);  // no branch: vectorises
  if (all_finite) return;
  for (int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(x[k])) {
      *args.first = k;
      *args.value = x[k];
      return;
    }
  }
}

}  // namespace meshlayout
