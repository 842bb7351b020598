// adam.cc — keras.optimizers.Adam. See adam.h.
#include "meshlayout/train/adam.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

template <typename T>
void adam_step(const ShardStep<T>& s, const AdamOptions& o) {
  const T t = static_cast<T>(s.iterations + 1);
  const T b1_power = std::pow(static_cast<T>(o.beta_1), t);
  const T b2_power = std::pow(static_cast<T>(o.beta_2), t);
  const T alpha = s.lr * std::sqrt(T(1) - b2_power) / (T(1) - b1_power);
  const T one_minus_b1 = static_cast<T>(1.0 - o.beta_1),
          one_minus_b2 = static_cast<T>(1.0 - o.beta_2);
  const T eps = static_cast<T>(o.epsilon);
  T* m = s.slots[0];
  T* v = s.slots[1];
  T* v_hat = o.amsgrad ? s.slots[2] : nullptr;
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    m[k] += (g - m[k]) * one_minus_b1;
    v[k] += (g * g - v[k]) * one_minus_b2;
    T denom_v = v[k];
    if (v_hat) {
      v_hat[k] = std::max(v_hat[k], v[k]);
      denom_v = v_hat[k];
    }
    s.theta[k] -= (m[k] * alpha) / (std::sqrt(denom_v) + eps);
  }
}

}  // namespace

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

void Adam::update_shard(const ShardStep<float>& step) const { adam_step(step, options_); }
void Adam::update_shard(const ShardStep<double>& step) const { adam_step(step, options_); }

MESHLAYOUT_REGISTER_OPTIMIZER(adam, Adam, "adam")

}  // namespace meshlayout
