// hf_checkpoint.h — the per-shard kernels of loading a Hugging Face Llama checkpoint
// (models/hf_llama_checkpoint.h): where a file read may land a shard's bytes directly, a staged
// block of the file converted to F32 and permuted into its region of a shard, a copy of a
// replica's shard, and the search for a non-finite weight. Also the host-memory permutation
// the CPU kernel is made of (saving a checkpoint uses it on host tensors).
//
// Example (per piece of a shard s, its file block read into `staging` on s's device):
//   hf_permute_into_shard(kind_of(array), {.staging = staging.data(), .src_dtype = DType::kBF16,
//                                          .view_shape = &view_box.shape, .perm = perm,
//                                          .dst = &s, .region = &keras_box});
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// *bytes = the shard's own memory when a file read may write it directly (host-addressable
/// device memory: CPU), else null (the caller stages the read and converts it in).
struct ShardHostBytes {
  Array::Shard* shard;
  std::byte** bytes;
};

/// The row-major block `staging` (of `view_shape`, in src_dtype: F32, BF16 or F16; memory of
/// dst's device) through the dimension permutation `perm` (output dim i is view dim perm[i]),
/// converted to F32, into `region` (global coordinates, inside dst's box) of the F32 shard dst.
struct HfPermuteIntoShard {
  const std::byte* staging;
  DType src_dtype;
  const Shape* view_shape;
  std::span<const int> perm;
  Array::Shard* dst;
  const Box* region;
};

/// dst's bytes = src's (two shards of the same box and dtype, on one device).
struct CopyReplicaShard {
  Array::Shard* dst;
  const Array::Shard* src;
};

/// *first = the index of the first non-finite element of an F32 shard (in its box, row-major)
/// and *value that element, or *first = -1 when every element is finite.
struct FindNonFinite {
  const Array::Shard* shard;
  int64_t* first;
  float* value;
};

/// Output element k (rank r, shape src_shape[perm[i]] along dim i) is written at
/// dst[sum k[i] * dst_strides[i]] from source element v with v[perm[i]] = k[i]. `src` is
/// row-major of `src_shape` in `src_dtype` (F32, BF16 or F16; ValueError otherwise). Host memory
/// on both sides: what hf_permute_into_shard's CPU implementation runs.
void permute_to_f32_host(const std::byte* src, DType src_dtype, const Shape& src_shape,
                         std::span<const int> perm, float* dst,
                         std::span<const int64_t> dst_strides);

void shard_host_bytes_cpu(const ShardHostBytes& args);
void hf_permute_into_shard_cpu(const HfPermuteIntoShard& args);
void copy_replica_shard_cpu(const CopyReplicaShard& args);
void find_non_finite_cpu(const FindNonFinite& args);

inline KernelOp<void(const ShardHostBytes&)> shard_host_bytes{"shard_host_bytes",
                                                              &shard_host_bytes_cpu};
inline KernelOp<void(const HfPermuteIntoShard&)> hf_permute_into_shard{"hf_permute_into_shard",
                                                                       &hf_permute_into_shard_cpu};
inline KernelOp<void(const CopyReplicaShard&)> copy_replica_shard{"copy_replica_shard",
                                                                  &copy_replica_shard_cpu};
inline KernelOp<void(const FindNonFinite&)> find_non_finite{"find_non_finite",
                                                            &find_non_finite_cpu};

}  // namespace meshlayout
