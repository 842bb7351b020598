// cpu/soft_cap.cc — the CPU implementation of kernels/soft_cap.h.
#include <cmath>

#include "meshlayout/kernels/cpu/float_dispatch.h"
#include "meshlayout/kernels/soft_cap.h"

namespace meshlayout {
namespace {

template <typename E>
void cap_in_place(E* x, int64_t n, E cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

template <typename E>
void cap_backward(E* dy, const E* y, int64_t n, E cap) {
  for (int64_t i = 0; i < n; ++i) {
    const E t = y[i] / cap;
    dy[i] *= E(1) - t * t;
  }
}

}  // namespace

void soft_cap_shard_cpu(const SoftCapShard& a) {
  const int64_t n = a.shard->box.num_elements();
  cpu_kernels::dispatch_float(a.dtype, [&]<typename E>(E* /*tag*/) {
    cap_in_place(reinterpret_cast<E*>(a.shard->buffer.data()), n, static_cast<E>(a.cap));
  });
}

void soft_cap_backward_shard_cpu(const SoftCapBackwardShard& a) {
  const int64_t n = a.dy->box.num_elements();
  cpu_kernels::dispatch_float(a.dtype, [&]<typename E>(E* /*tag*/) {
    cap_backward(reinterpret_cast<E*>(a.dy->buffer.data()),
                 reinterpret_cast<const E*>(a.y->buffer.data()), n, static_cast<E>(a.cap));
  });
}

}  // namespace meshlayout
