// cpu/dropout.cc — the CPU implementation of kernels/dropout.h.
#include "meshlayout/kernels/dropout.h"

#include <vector>

#include "meshlayout/init/philox.h"
#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {

void dropout_mask_cpu(const DropoutMask& a) {
  const uint64_t key = a.key;
  const uint64_t high = a.counter_high;
  // keep iff word < keep_prob * 2^32 (exact in double).
  const double threshold = (1.0 - a.rate) * 4294967296.0;
  const Shape& shape = *a.shape;
  const int rank = static_cast<int>(shape.size());
  // E: float (F32) or double (F64), y's element type; the mask does not depend on it.
  cpu_kernels::dispatch_float(a.dtype, [&]<typename E>(E* /*tag*/) {
    const E keep_prob = static_cast<E>(1.0 - a.rate);
    Array::Shard& s = *a.y;
    const int64_t n_elems = s.box.num_elements();
    if (n_elems == 0) return;
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const int64_t row = rank == 0 ? 1 : s.box.shape.back();
    const int64_t rows = n_elems / row;
    Shape coords = s.box.offset;  // the start of the current row, global coordinates
    std::vector<uint32_t> w[4];
    for (int64_t r = 0; r < rows; ++r) {
      int64_t g0 = 0;
      for (int d = 0; d < rank; ++d)
        g0 = g0 * shape[static_cast<size_t>(d)] + coords[static_cast<size_t>(d)];
      const uint64_t first = static_cast<uint64_t>(g0) / 4;
      const size_t blocks =
          static_cast<size_t>((static_cast<uint64_t>(g0 + row - 1) / 4) - first + 1);
      for (auto& words : w) words.resize(blocks);
      philox4x32_10_blocks(key, first, high, blocks,
                           {w[0].data(), w[1].data(), w[2].data(), w[3].data()});
      E* v = p + r * row;
      for (int64_t k = 0; k < row; ++k) {
        const uint64_t g = static_cast<uint64_t>(g0 + k);
        const uint32_t word = w[g % 4][g / 4 - first];
        v[k] = static_cast<double>(word) < threshold ? v[k] / keep_prob : E{0};
      }
      // Next row: advance the leading coordinates inside the box (odometer).
      for (int d = rank - 2; d >= 0; --d) {
        const auto di = static_cast<size_t>(d);
        if (++coords[di] < s.box.offset[di] + s.box.shape[di]) break;
        coords[di] = s.box.offset[di];
      }
    }
  });
}

}  // namespace meshlayout
