// cpu/adam_update.cc — the CPU implementation of kernels/adam_update.h, moved unchanged from
// train/.
#include "meshlayout/kernels/adam_update.h"

#include <algorithm>
#include <cmath>

#include "meshlayout/kernels/cpu/optimizer_step.h"

namespace meshlayout {
namespace {

using optimizer_cpu::ShardStep;

template <typename T>
void adam_step(const ShardStep<T>& s, const AdamParams& o) {
  const T t = static_cast<T>(s.iterations + 1);
  const T b1_power = std::pow(static_cast<T>(o.beta_1), t);
  const T b2_power = std::pow(static_cast<T>(o.beta_2), t);
  const T alpha = s.lr * std::sqrt(T(1) - b2_power) / (T(1) - b1_power);
  const T one_minus_b1 = static_cast<T>(1.0 - o.beta_1),
          one_minus_b2 = static_cast<T>(1.0 - o.beta_2);
  const T eps = static_cast<T>(o.epsilon);
  T* m = s.slots[0];
  T* v = s.slots[1];
  T* v_hat = o.amsgrad ? s.slots[2] : nullptr;
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    m[k] += (g - m[k]) * one_minus_b1;
    v[k] += (g * g - v[k]) * one_minus_b2;
    T denom_v = v[k];
    if (v_hat) {
      v_hat[k] = std::max(v_hat[k], v[k]);
      denom_v = v_hat[k];
    }
    s.theta[k] -= (m[k] * alpha) / (std::sqrt(denom_v) + eps);
  }
}

}  // namespace

void adam_update_cpu(const AdamUpdate& args) {
  optimizer_cpu::update(args, [](const auto& s, const AdamParams& o) { adam_step(s, o); });
}

}  // namespace meshlayout
