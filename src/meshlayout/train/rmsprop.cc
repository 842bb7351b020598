// rmsprop.cc — keras.optimizers.RMSprop. See rmsprop.h.
#include "meshlayout/train/rmsprop.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/rmsprop_update.h"

namespace meshlayout {

RMSpropOptions RMSpropOptions::from(const OptimizerOptions& options) {
  OptimizerArguments a(options, "RMSprop");
  RMSpropOptions o{.rho = a.number("rho", 0.9),
                   .momentum = a.number("momentum", 0.0),
                   .epsilon = a.number("epsilon", 1e-7),
                   .centered = a.flag("centered", false)};
  a.finish();
  return o;
}

void RMSpropOptions::check() const {
  for (const auto& [what, v] : {std::pair{"rho", rho}, std::pair{"momentum", momentum}}) {
    if (!(v >= 0.0 && v <= 1.0)) {
      throw ValueError(
          fmt::format("`{}` must be a float in [0, 1]. Received: {}={}", what, what, v));
    }
  }
  if (!(epsilon >= 0.0 && std::isfinite(epsilon))) {
    throw ValueError(
        fmt::format("`epsilon` must be a finite float >= 0. Received: epsilon={}", epsilon));
  }
}

RMSprop::RMSprop(const OptimizerOptions& options)
    : RMSprop(RMSpropOptions::from(options), options) {}

RMSprop::RMSprop(const RMSpropOptions& own, const OptimizerOptions& options)
    : Optimizer("RMSprop", 0.001, options), options_(own) {
  options_.check();
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> names{"velocity"};
  if (options_.momentum > 0) names.push_back("momentum");
  if (options_.centered) names.push_back("average_gradient");
  return names;
}

void RMSprop::build_slots(std::span<const VariablePtr> variables) {
  for (const std::string& name : slot_names()) add_optimizer_variables(variables, {name});
}

void RMSprop::update_shard(DeviceKind kind, const OptimizerShardStep& step) const {
  rmsprop_update(kind, {step, RmspropParams{options_.rho, options_.momentum, options_.epsilon,
                                            options_.centered}});
}

MESHLAYOUT_REGISTER_OPTIMIZER(rmsprop, RMSprop, "rmsprop")

}  // namespace meshlayout
