// adam.cc — keras.optimizers.Adam. See adam.h.
#include "meshlayout/train/adam.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/adam_update.h"

namespace meshlayout {

AdamOptions AdamOptions::from(const OptimizerOptions& options, std::string_view class_name) {
  OptimizerArguments a(options, class_name);
  AdamOptions o{.beta_1 = a.number("beta_1", 0.9),
                .beta_2 = a.number("beta_2", 0.999),
                .epsilon = a.number("epsilon", 1e-7),
                .amsgrad = a.flag("amsgrad", false)};
  a.finish();
  return o;
}

void AdamOptions::check() const {
  for (const auto& [what, v] : {std::pair{"beta_1", beta_1}, std::pair{"beta_2", beta_2}}) {
    if (!(v >= 0.0 && v < 1.0)) {
      throw ValueError(
          fmt::format("`{}` must be a float in [0, 1). Received: {}={}", what, what, v));
    }
  }
  if (!(epsilon >= 0.0 && std::isfinite(epsilon))) {
    throw ValueError(
        fmt::format("`epsilon` must be a finite float >= 0. Received: epsilon={}", epsilon));
  }
}

Adam::Adam(const OptimizerOptions& options)
    : Adam("Adam", AdamOptions::from(options, "Adam"), options) {}

Adam::Adam(std::string_view class_name, const AdamOptions& own, const OptimizerOptions& options)
    : Optimizer(class_name, 0.001, options), options_(own) {
  options_.check();
}

std::vector<std::string> Adam::slot_names() const {
  if (options_.amsgrad) return {"momentum", "velocity", "velocity_hat"};
  return {"momentum", "velocity"};
}

void Adam::build_slots(std::span<const VariablePtr> variables) {
  add_optimizer_variables(variables, {"momentum", "velocity"});
  if (options_.amsgrad) add_optimizer_variables(variables, {"velocity_hat"});
}

void Adam::update_shard(DeviceKind kind, const OptimizerShardStep& step) const {
  adam_update(kind, {step, AdamParams{options_.beta_1, options_.beta_2, options_.epsilon,
                                      options_.amsgrad}});
}

MESHLAYOUT_REGISTER_OPTIMIZER(adam, Adam, "adam")

}  // namespace meshlayout
