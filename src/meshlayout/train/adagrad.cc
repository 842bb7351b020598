// adagrad.cc — keras.optimizers.Adagrad. See adagrad.h.
#include "meshlayout/train/adagrad.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/adagrad_update.h"

namespace meshlayout {

AdagradOptions AdagradOptions::from(const OptimizerOptions& options) {
  OptimizerArguments a(options, "Adagrad");
  AdagradOptions o{.initial_accumulator_value = a.number("initial_accumulator_value", 0.1),
                   .epsilon = a.number("epsilon", 1e-7)};
  a.finish();
  return o;
}

void AdagradOptions::check() const {
  for (const auto& [what, v] : {std::pair{"initial_accumulator_value", initial_accumulator_value},
                                std::pair{"epsilon", epsilon}}) {
    if (!(v >= 0.0 && std::isfinite(v))) {
      throw ValueError(
          fmt::format("`{}` must be a finite float >= 0. Received: {}={}", what, what, v));
    }
  }
}

Adagrad::Adagrad(const OptimizerOptions& options)
    : Adagrad(AdagradOptions::from(options), options) {}

Adagrad::Adagrad(const AdagradOptions& own, const OptimizerOptions& options)
    : Optimizer("Adagrad", 0.001, options), options_(own) {
  options_.check();
}

std::vector<std::string> Adagrad::slot_names() const { return {"accumulator"}; }

void Adagrad::build_slots(std::span<const VariablePtr> variables) {
  add_optimizer_variables(variables, {"accumulator"}, options_.initial_accumulator_value);
}

void Adagrad::update_shard(DeviceKind kind, const OptimizerShardStep& step) const {
  adagrad_update(kind, {step, AdagradParams{options_.epsilon}});
}

MESHLAYOUT_REGISTER_OPTIMIZER(adagrad, Adagrad, "adagrad")

}  // namespace meshlayout
