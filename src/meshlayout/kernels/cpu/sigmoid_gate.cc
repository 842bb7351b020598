// cpu/sigmoid_gate.cc — the CPU implementation of kernels/sigmoid_gate.h.
#include <cmath>

#include "meshlayout/kernels/cpu/float_dispatch.h"
#include "meshlayout/kernels/sigmoid_gate.h"

namespace meshlayout {
namespace {

template <typename E>
E sigmoid(E x) {
  return E(1) / (E(1) + std::exp(-x));
}

// The row length of a shard: its box's last extent (1 for a rank-0 box).
int64_t row_length(const Array::Shard& s) { return s.box.shape.empty() ? 1 : s.box.shape.back(); }

}  // namespace

void sigmoid_gate_shard_cpu(const SigmoidGateShard& a) {
  const int64_t width = row_length(*a.y);
  const int64_t rows = width == 0 ? 0 : a.y->box.num_elements() / width;
  cpu_kernels::dispatch_float(a.dtype, [&]<typename E>(E* /*tag*/) {
    E* y = reinterpret_cast<E*>(a.y->buffer.data());
    const E* g = reinterpret_cast<const E*>(a.g->buffer.data());
    for (int64_t r = 0; r < rows; ++r) {
      const E gate = sigmoid(g[r]);
      for (int64_t j = 0; j < width; ++j) y[r * width + j] *= gate;
    }
  });
}

void sigmoid_gate_backward_shard_cpu(const SigmoidGateBackwardShard& a) {
  const int64_t width = row_length(*a.s);
  const int64_t rows = width == 0 ? 0 : a.s->box.num_elements() / width;
  cpu_kernels::dispatch_float(a.dtype, [&]<typename E>(E* /*tag*/) {
    E* g = reinterpret_cast<E*>(a.g->buffer.data());
    const E* s = reinterpret_cast<const E*>(a.s->buffer.data());
    const E* dy = reinterpret_cast<const E*>(a.dy->buffer.data());
    for (int64_t r = 0; r < rows; ++r) {
      E dot = 0;
      for (int64_t j = 0; j < width; ++j) dot += dy[r * width + j] * s[r * width + j];
      const E p = sigmoid(g[r]);
      g[r] = p * (E(1) - p) * dot;
    }
  });
}

}  // namespace meshlayout
