// cpu/gated_activation.cc — the CPU implementation of kernels/gated_activation.h (SwiGLU's loops
// moved unchanged from ops/swiglu.cc, GeGLU's from the former kernels/cpu/geglu.cc).
#include "meshlayout/kernels/gated_activation.h"

#include <cmath>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // √(2/π)
constexpr double kCubic = 0.044715;

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename E>
void swiglu_forward(const GatedForward& args) {
  const int64_t n = args.y->box.num_elements();
  E* y = reinterpret_cast<E*>(args.y->buffer.data());
  const E* gp = reinterpret_cast<const E*>(args.g->buffer.data());
  const E* up = reinterpret_cast<const E*>(args.u->buffer.data());
  for (int64_t k = 0; k < n; ++k) y[k] = gp[k] * sigmoid(gp[k]) * up[k];
}

template <typename E>
void swiglu_backward(const GatedBackward& args) {
  const int64_t n = args.dg->box.num_elements();
  E* dgp = reinterpret_cast<E*>(args.dg->buffer.data());
  E* dup = reinterpret_cast<E*>(args.du->buffer.data());
  const E* gp = reinterpret_cast<const E*>(args.g->buffer.data());
  const E* up = reinterpret_cast<const E*>(args.u->buffer.data());
  const E* dyp = reinterpret_cast<const E*>(args.dy->buffer.data());
  for (int64_t k = 0; k < n; ++k) {
    const E s = sigmoid(gp[k]);
    const E silu = gp[k] * s;
    dup[k] = dyp[k] * silu;
    dgp[k] = dyp[k] * up[k] * (s + silu * (E(1) - s));
  }
}

template <typename E>
void geglu_forward(const GatedForward& args) {
  const int64_t n = args.y->box.num_elements();
  E* y = reinterpret_cast<E*>(args.y->buffer.data());
  const E* g = reinterpret_cast<const E*>(args.g->buffer.data());
  const E* u = reinterpret_cast<const E*>(args.u->buffer.data());
  const E c = static_cast<E>(kSqrt2OverPi), a = static_cast<E>(kCubic);
  for (int64_t k = 0; k < n; ++k) {
    const E x = g[k];
    const E t = std::tanh(c * (x + a * x * x * x));
    y[k] = E(0.5) * x * (E(1) + t) * u[k];
  }
}

template <typename E>
void geglu_backward(const GatedBackward& args) {
  const int64_t n = args.dg->box.num_elements();
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
}

}  // namespace

void gated_forward_cpu(const GatedForward& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    if (args.function == GateFunction::kSilu) {
      swiglu_forward<E>(args);
    } else {
      geglu_forward<E>(args);
    }
  });
}

void gated_backward_cpu(const GatedBackward& args) {
  cpu_kernels::dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) {
    if (args.function == GateFunction::kSilu) {
      swiglu_backward<E>(args);
    } else {
      geglu_backward<E>(args);
    }
  });
}

}  // namespace meshlayout
