// cpu/geglu.cc — the CPU implementation of kernels/geglu.h.
#include "meshlayout/kernels/geglu.h"

#include <cmath>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kCubic = 0.044715;

}  // namespace

void geglu_forward_cpu(const GegluForward& args) {
  Array::Shard& s = *args.y;
  const int64_t n = s.box.num_elements();
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* y = reinterpret_cast<E*>(s.buffer.data());
    const E* g = reinterpret_cast<const E*>(args.g->buffer.data());
    const E* u = reinterpret_cast<const E*>(args.u->buffer.data());
    const E c = static_cast<E>(kSqrt2OverPi), a = static_cast<E>(kCubic);
    for (int64_t k = 0; k < n; ++k) {
      const E x = g[k];
      const E t = std::tanh(c * (x + a * x * x * x));
      y[k] = E(0.5) * x * (E(1) + t) * u[k];
    }
  });
}

void geglu_backward_cpu(const GegluBackward& args) {
  const int64_t n = args.dg->box.num_elements();
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    E* dg = reinterpret_cast<E*>(args.dg->buffer.data());
    E* du = reinterpret_cast<E*>(args.du->buffer.data());
    const E* g = reinterpret_cast<const E*>(args.g->buffer.data());
    const E* u = reinterpret_cast<const E*>(args.u->buffer.data());
    const E* dy = reinterpret_cast<const E*>(args.dy->buffer.data());
    const E c = static_cast<E>(kSqrt2OverPi), a = static_cast<E>(kCubic);
    for (int64_t k = 0; k < n; ++k) {
      const E x = g[k];
      const E t = std::tanh(c * (x + a * x * x * x));
      const E gelu = E(0.5) * x * (E(1) + t);
      const E dgelu =
          E(0.5) * (E(1) + t) + E(0.5) * x * (E(1) - t * t) * c * (E(1) + E(3) * a * x * x);
      du[k] = dy[k] * gelu;
      dg[k] = dy[k] * u[k] * dgelu;
    }
  });
}

}  // namespace meshlayout
