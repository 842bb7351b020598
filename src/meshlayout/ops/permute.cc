#include "meshlayout/ops/permute.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/permute.h"

namespace meshlayout {

std::vector<int> inverse_permutation(const std::vector<int>& perm) {
  std::vector<int> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  return inverse;
}

Array permute_dims(const Array& x, const std::vector<int>& perm) {
  const size_t rank = x.shape().size();
  std::vector<bool> seen(rank, false);
  bool valid = perm.size() == rank;
  for (const int p : perm) {
    valid = valid && p >= 0 && static_cast<size_t>(p) < rank && !seen[static_cast<size_t>(p)];
    if (valid) seen[static_cast<size_t>(p)] = true;
  }
  if (!valid) {
    throw ValueError(
        fmt::format("permute_dims: ({}) is not a permutation of the {} dimensions of {}",
                    fmt::join(perm, ", "), rank, shape_to_string(x.shape())));
  }
  Shape shape(rank);
  std::vector<DimSharding> axes(rank);
  for (size_t i = 0; i < rank; ++i) {
    shape[i] = x.shape()[static_cast<size_t>(perm[i])];
    axes[i] = x.layout().axes()[static_cast<size_t>(perm[i])];
  }
  Array out = allocate_agreed(TensorLayout(axes, x.mesh()), shape, x.dtype(), x.runtime_ptr());
  const DeviceKind kind = kind_of(x);
  const size_t element_size = dtype_size(x.dtype());
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    permute_shard(
        kind,
        {.src = x.shard_at(o.position), .dst = &o, .perm = perm, .element_size = element_size});
  });
  return out;
}

}  // namespace meshlayout
