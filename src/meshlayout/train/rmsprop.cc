// rmsprop.cc — keras.optimizers.RMSprop. See rmsprop.h.
#include "meshlayout/train/rmsprop.h"

#include <fmt/format.h>

#include <cmath>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

template <typename T>
void rmsprop_step(const ShardStep<T>& s, const RMSpropOptions& o) {
  const T rho = static_cast<T>(o.rho), one_minus_rho = static_cast<T>(1.0 - o.rho);
  const T eps = static_cast<T>(o.epsilon), mu = static_cast<T>(o.momentum);
  size_t next = 0;
  T* v = s.slots[next++];
  T* m = o.momentum > 0 ? s.slots[next++] : nullptr;
  T* a = o.centered ? s.slots[next++] : nullptr;
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    v[k] = rho * v[k] + one_minus_rho * (g * g);
    T denominator;
    if (a) {
      a[k] = rho * a[k] + one_minus_rho * g;
      denominator = v[k] - a[k] * a[k] + eps;
    } else {
      denominator = v[k] + eps;
    }
    const T increment = (s.lr * g) / std::sqrt(denominator);
    if (m) {
      m[k] = mu * m[k] + increment;
      s.theta[k] -= m[k];
    } else {
      s.theta[k] -= increment;
    }
  }
}

}  // namespace

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

void RMSprop::update_shard(const ShardStep<float>& step) const { rmsprop_step(step, options_); }
void RMSprop::update_shard(const ShardStep<double>& step) const { rmsprop_step(step, options_); }

MESHLAYOUT_REGISTER_OPTIMIZER(rmsprop, RMSprop, "rmsprop")

}  // namespace meshlayout
