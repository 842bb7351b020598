// sgd.cc — keras.optimizers.SGD. See sgd.h.
#include "meshlayout/train/sgd.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/sgd_update.h"

namespace meshlayout {

SGDOptions SGDOptions::from(const OptimizerOptions& options) {
  OptimizerArguments a(options, "SGD");
  SGDOptions o{.momentum = a.number("momentum", 0.0), .nesterov = a.flag("nesterov", false)};
  a.finish();
  return o;
}

void SGDOptions::check() const {
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    throw ValueError(
        fmt::format("`momentum` must be a float between [0, 1]. Received: momentum={}", momentum));
  }
}

SGD::SGD(const OptimizerOptions& options) : SGD(SGDOptions::from(options), options) {}

SGD::SGD(const SGDOptions& own, const OptimizerOptions& options)
    : Optimizer("SGD", 0.01, options), options_(own) {
  options_.check();
}

std::vector<std::string> SGD::slot_names() const {
  if (options_.momentum != 0.0) return {"momentum"};
  return {};
}

void SGD::build_slots(std::span<const VariablePtr> variables) {
  if (options_.momentum != 0.0) add_optimizer_variables(variables, {"momentum"});
}

void SGD::update_shard(DeviceKind kind, const OptimizerShardStep& step) const {
  sgd_update(kind, {step, SgdParams{options_.momentum, options_.nesterov}});
}

MESHLAYOUT_REGISTER_OPTIMIZER(sgd, SGD, "SGD")

}  // namespace meshlayout
