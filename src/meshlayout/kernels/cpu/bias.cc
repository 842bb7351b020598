// cpu/bias.cc — the CPU implementation of kernels/bias.h.
#include "meshlayout/kernels/bias.h"

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {

void add_bias_cpu(const AddBias& args) {
  Array::Shard& s = *args.y;
  const int64_t inner = args.inner;
  if (inner == 0) return;
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const E* b = reinterpret_cast<const E*>(args.bias->buffer.data());
    for (int64_t r = 0; r < s.box.num_elements() / inner; ++r) {
      for (int64_t c = 0; c < inner; ++c) p[r * inner + c] += b[c];
    }
  });
}

}  // namespace meshlayout
