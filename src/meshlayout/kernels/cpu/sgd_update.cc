// cpu/sgd_update.cc — the CPU implementation of kernels/sgd_update.h, moved unchanged from train/.
#include "meshlayout/kernels/sgd_update.h"

#include <algorithm>
#include <cmath>

#include "meshlayout/kernels/cpu/optimizer_step.h"

namespace meshlayout {
namespace {

using optimizer_cpu::ShardStep;

template <typename T>
void sgd_step(const ShardStep<T>& s, double momentum, bool nesterov) {
  if (s.slots.empty()) {
    for (int64_t k = 0; k < s.n; ++k) s.theta[k] -= s.grad[k] * s.lr;
    return;
  }
  const T mu = static_cast<T>(momentum);
  T* m = s.slots[0];
  for (int64_t k = 0; k < s.n; ++k) {
    m[k] = m[k] * mu - s.grad[k] * s.lr;
    s.theta[k] += nesterov ? m[k] * mu - s.grad[k] * s.lr : m[k];
  }
}

}  // namespace

void sgd_update_cpu(const SgdUpdate& args) {
  optimizer_cpu::update(
      args, [](const auto& s, const SgdParams& o) { sgd_step(s, o.momentum, o.nesterov); });
}

}  // namespace meshlayout
