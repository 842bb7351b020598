// lion.cc — keras.optimizers.Lion. See lion.h.
#include "meshlayout/train/lion.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

template <typename T>
void lion_step(const ShardStep<T>& s, const LionOptions& o) {
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

LionOptions LionOptions::from(const OptimizerOptions& options) {
  OptimizerArguments a(options, "Lion");
  LionOptions o{.beta_1 = a.number("beta_1", 0.9), .beta_2 = a.number("beta_2", 0.99)};
  a.finish();
  return o;
}

void LionOptions::check() const {
  if (!(beta_1 > 0.0 && beta_1 <= 1.0)) {
    throw ValueError(
        fmt::format("Argument `beta_1` must be in the (0, 1] range. Otherwise, the optimizer "
                    "degenerates to SignSGD. "
                    "Received: beta_1={}",
                    beta_1));
  }
  if (!(beta_2 >= 0.0 && beta_2 <= 1.0)) {
    throw ValueError(
        fmt::format("`beta_2` must be a float in [0, 1]. Received: beta_2={}", beta_2));
  }
}

Lion::Lion(const OptimizerOptions& options) : Lion(LionOptions::from(options), options) {}

Lion::Lion(const LionOptions& own, const OptimizerOptions& options)
    : Optimizer("Lion", 0.001, options), options_(own) {
  options_.check();
}

std::vector<std::string> Lion::slot_names() const { return {"momentum"}; }

void Lion::build_slots(std::span<const VariablePtr> variables) {
  add_optimizer_variables(variables, {"momentum"});
}

void Lion::update_shard(const ShardStep<float>& step) const { lion_step(step, options_); }
void Lion::update_shard(const ShardStep<double>& step) const { lion_step(step, options_); }

MESHLAYOUT_REGISTER_OPTIMIZER(lion, Lion, "lion")

}  // namespace meshlayout
