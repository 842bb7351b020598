// sgd.cc — keras.optimizers.SGD. See sgd.h.
#include "meshlayout/train/sgd.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

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

void SGD::update_shard(const ShardStep<float>& step) const {
  sgd_step(step, options_.momentum, options_.nesterov);
}
void SGD::update_shard(const ShardStep<double>& step) const {
  sgd_step(step, options_.momentum, options_.nesterov);
}

MESHLAYOUT_REGISTER_OPTIMIZER(sgd, SGD, "SGD")

}  // namespace meshlayout
