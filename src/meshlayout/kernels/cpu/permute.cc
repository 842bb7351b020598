// cpu/permute.cc — the CPU implementation of kernels/permute.h.
#include <cstring>
#include <vector>

#include "meshlayout/kernels/permute.h"

namespace meshlayout {

void permute_shard_cpu(const PermuteShard& a) {
  const Shape& in = a.src->box.shape;
  const size_t rank = in.size();
  if (a.src->box.num_elements() == 0) return;
  // Row-major strides of the source, taken in the output's dimension order.
  std::vector<int64_t> in_strides(rank, 1), strides(rank), out_shape(rank);
  for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * in[i];
  for (size_t i = 0; i < rank; ++i) {
    strides[i] = in_strides[static_cast<size_t>(a.perm[i])];
    out_shape[i] = in[static_cast<size_t>(a.perm[i])];
  }
  const std::byte* src = a.src->buffer.data();
  std::byte* dst = a.dst->buffer.data();
  const size_t es = a.element_size;
  const int64_t inner = rank ? out_shape[rank - 1] : 1;
  const int64_t inner_stride = rank ? strides[rank - 1] : 1;
  std::vector<int64_t> index(rank, 0);
  const int64_t rows = a.src->box.num_elements() / inner;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t offset = 0;
    for (size_t i = 0; i + 1 < rank; ++i) offset += index[i] * strides[i];
    for (int64_t j = 0; j < inner; ++j) {
      std::memcpy(dst, src + static_cast<size_t>(offset + j * inner_stride) * es, es);
      dst += es;
    }
    for (size_t i = rank - 1; i-- > 0;) {  // next row: the odometer over the outer dimensions
      if (++index[i] < out_shape[i]) break;
      index[i] = 0;
    }
  }
}

}  // namespace meshlayout
