// cpu/lion_update.cc — the CPU implementation of kernels/lion_update.h, moved unchanged from
// train/.
#include "meshlayout/kernels/lion_update.h"

#include <algorithm>
#include <cmath>

#include "meshlayout/kernels/cpu/optimizer_step.h"

namespace meshlayout {
namespace {

using optimizer_cpu::ShardStep;

template <typename T>
void lion_step(const ShardStep<T>& s, const LionParams& o) {
  const T b1 = static_cast<T>(o.beta_1), b2 = static_cast<T>(o.beta_2);
  const T one_minus_b1 = T(1) - b1, one_minus_b2 = T(1) - b2;  // Keras: 1.0 - cast(beta)
  T* m = s.slots[0];
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    const T c = m[k] * b1 + g * one_minus_b1;
    const T sign = c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0));
    s.theta[k] -= s.lr * sign;
    m[k] = m[k] * b2 + g * one_minus_b2;
  }
}

}  // namespace

void lion_update_cpu(const LionUpdate& args) {
  optimizer_cpu::update(args, [](const auto& s, const LionParams& o) { lion_step(s, o); });
}

}  // namespace meshlayout
