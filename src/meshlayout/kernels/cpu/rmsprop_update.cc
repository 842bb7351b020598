// cpu/rmsprop_update.cc — the CPU implementation of kernels/rmsprop_update.h, moved unchanged from
// train/.
#include "meshlayout/kernels/rmsprop_update.h"

#include <algorithm>
#include <cmath>

#include "meshlayout/kernels/cpu/optimizer_step.h"

namespace meshlayout {
namespace {

using optimizer_cpu::ShardStep;

template <typename T>
void rmsprop_step(const ShardStep<T>& s, const RmspropParams& o) {
  const T rho = static_cast<T>(o.rho), one_minus_rho = static_cast<T>(1.0 - o.rho);
  const T eps = static_cast<T>(o.epsilon), mu = static_cast<T>(o.momentum);
  size_t next = 0;
  T* v = s.slots[next++];
  T* m = o.momentum > 0 ? s.slots[next++] : nullptr;
  T* a = o.centered ? s.slots[next++] : nullptr;
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    v[k] = rho * v[k] + one_minus_rho * (g * g);
    T denominator;
    if (a) {
      a[k] = rho * a[k] + one_minus_rho * g;
      denominator = v[k] - a[k] * a[k] + eps;
    } else {
      denominator = v[k] + eps;
    }
    const T increment = (s.lr * g) / std::sqrt(denominator);
    if (m) {
      m[k] = mu * m[k] + increment;
      s.theta[k] -= m[k];
    } else {
      s.theta[k] -= increment;
    }
  }
}

}  // namespace

void rmsprop_update_cpu(const RmspropUpdate& args) {
  optimizer_cpu::update(args, [](const auto& s, const RmspropParams& o) { rmsprop_step(s, o); });
}

}  // namespace meshlayout
