// cpu/adagrad_update.cc — the CPU implementation of kernels/adagrad_update.h, moved unchanged from
// train/.
#include "meshlayout/kernels/adagrad_update.h"

#include <algorithm>
#include <cmath>

#include "meshlayout/kernels/cpu/optimizer_step.h"

namespace meshlayout {
namespace {

using optimizer_cpu::ShardStep;

template <typename T>
void adagrad_step(const ShardStep<T>& s, const AdagradParams& o) {
  const T eps = static_cast<T>(o.epsilon);
  T* acc = s.slots[0];
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    acc[k] += g * g;
    s.theta[k] -= (s.lr * g) / std::sqrt(acc[k] + eps);
  }
}

}  // namespace

void adagrad_update_cpu(const AdagradUpdate& args) {
  optimizer_cpu::update(args, [](const auto& s, const AdagradParams& o) { adagrad_step(s, o); });
}

}  // namespace meshlayout
