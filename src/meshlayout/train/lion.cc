// lion.cc — keras.optimizers.Lion. See lion.h.
#include "meshlayout/train/lion.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/lion_update.h"

namespace meshlayout {

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

void Lion::update_shard(DeviceKind kind, const OptimizerShardStep& step) const {
  lion_update(kind, {step, LionParams{options_.beta_1, options_.beta_2}});
}

MESHLAYOUT_REGISTER_OPTIMIZER(lion, Lion, "lion")

}  // namespace meshlayout
