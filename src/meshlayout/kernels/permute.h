// permute.h — the per-shard kernel of a dimension permutation (ops/permute.h): a shard's box
// rearranged so that output dimension i is input dimension perm[i], elements moved as opaque
// units of element_size bytes (any dtype).
//
// Example (per device, out's shard at the same mesh position as x's):
//   permute_shard(kind_of(x), {.src = &xs, .dst = &os, .perm = perm, .element_size = 4});
#pragma once

#include <cstddef>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// dst (box shape src box shape[perm[i]] along dim i) = src permuted; both on one device.
struct PermuteShard {
  const Array::Shard* src;
  Array::Shard* dst;
  std::span<const int> perm;
  size_t element_size;
};

void permute_shard_cpu(const PermuteShard& args);

inline KernelOp<void(const PermuteShard&)> permute_shard{"permute_shard", &permute_shard_cpu};

}  // namespace meshlayout
