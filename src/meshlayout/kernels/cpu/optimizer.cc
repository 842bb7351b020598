// cpu/optimizer.cc — the CPU implementation of kernels/optimizer.h: the preparation of a
// shard's step, the sums of squares and the scalar writes (each optimizer's rule is in
// cpu/<name>_update.cc), moved unchanged from train/.
#include "meshlayout/kernels/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "meshlayout/kernels/cpu/optimizer_step.h"

namespace meshlayout {

void sum_of_squares_cpu(const SumOfSquares& args) {
  const Array::Shard& s = *args.shard;
  double& sum = *args.sum;
  const int64_t n = s.box.num_elements();
  for (int64_t k = 0; k < n; ++k) {
    const double x = args.dtype == DType::kF32
                         ? reinterpret_cast<const float*>(s.buffer.data())[k]
                         : reinterpret_cast<const double*>(s.buffer.data())[k];
    sum += x * x;
  }
}

void optimizer_prepare_cpu(const OptimizerPrepare& args) {
  cpu_kernels::dispatch_float(args.step.dtype, [&]<typename T>(T* /*tag*/) {
    std::vector<T> buffer;
    optimizer_cpu::with_shard_step<T>(args.step, buffer, [&](const optimizer_cpu::ShardStep<T>& s) {
      // An empty box (uneven splits leave some) has no buffer: memcpy of null is undefined.
      if (s.n > 0) {
        std::memcpy(args.prepared->buffer.data(), s.grad, static_cast<size_t>(s.n) * sizeof(T));
      }
    });
  });
}

void write_scalar_cpu(const WriteScalar& args) {
  std::memcpy(args.shard->buffer.data(), args.value, args.bytes);
}

}  // namespace meshlayout
