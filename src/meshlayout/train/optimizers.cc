// optimizers.cc — SGD, Adam, AdamW update rules (keras/src/optimizers/{sgd,adam,adamw}.py) and
// make_optimizer. See optimizer.h.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/train/optimizer.h"

namespace meshlayout {
namespace {

// Keras raises on an argument a class does not take ("Argument(s) not recognized"), before the
// base constructor takes an automatic name; returns `o`.
const OptimizerOptions& reject_foreign(const OptimizerOptions& o, std::string_view cls, bool sgd_args,
                                       bool adam_args) {
  std::vector<std::string> bad;
  if (!sgd_args) {
    if (o.momentum) bad.push_back(fmt::format("momentum={}", *o.momentum));
    if (o.nesterov) bad.push_back(fmt::format("nesterov={}", *o.nesterov));
  }
  if (!adam_args) {
    if (o.beta_1) bad.push_back(fmt::format("beta_1={}", *o.beta_1));
    if (o.beta_2) bad.push_back(fmt::format("beta_2={}", *o.beta_2));
    if (o.epsilon) bad.push_back(fmt::format("epsilon={}", *o.epsilon));
    if (o.amsgrad) bad.push_back(fmt::format("amsgrad={}", *o.amsgrad));
  }
  if (!bad.empty()) {
    throw ValueError(fmt::format("Argument(s) not recognized by {}: {}", cls, fmt::join(bad, ", ")));
  }
  return o;
}

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

template <typename T>
void adam_step(const ShardStep<T>& s, double beta_1, double beta_2, double epsilon, bool amsgrad) {
  const T t = static_cast<T>(s.iterations + 1);
  const T b1_power = std::pow(static_cast<T>(beta_1), t);
  const T b2_power = std::pow(static_cast<T>(beta_2), t);
  const T alpha = s.lr * std::sqrt(T(1) - b2_power) / (T(1) - b1_power);
  const T one_minus_b1 = static_cast<T>(1.0 - beta_1), one_minus_b2 = static_cast<T>(1.0 - beta_2);
  const T eps = static_cast<T>(epsilon);
  T* m = s.slots[0];
  T* v = s.slots[1];
  T* v_hat = amsgrad ? s.slots[2] : nullptr;
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

OptimizerOptions with_adamw_default(OptimizerOptions o) {
  if (!o.weight_decay) o.weight_decay = 0.004;
  return o;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

// ---- SGD ----------------------------------------------------------------------------------

SGD::SGD(const OptimizerOptions& options)
    : Optimizer("SGD", 0.01, reject_foreign(options, "SGD", true, false)),
      momentum_(options.momentum.value_or(0.0)),
      nesterov_(options.nesterov.value_or(false)) {
  if (!(momentum_ >= 0.0 && momentum_ <= 1.0)) {
    throw ValueError(fmt::format("`momentum` must be a float between [0, 1]. Received: momentum={}", momentum_));
  }
}

std::vector<std::string> SGD::slot_names() const {
  if (momentum_ != 0.0) return {"momentum"};
  return {};
}

void SGD::build_slots(std::span<const VariablePtr> variables) {
  if (momentum_ != 0.0) add_optimizer_variables(variables, {"momentum"});
}

void SGD::update_shard(const ShardStep<float>& step) const { sgd_step(step, momentum_, nesterov_); }
void SGD::update_shard(const ShardStep<double>& step) const { sgd_step(step, momentum_, nesterov_); }

// ---- Adam, AdamW --------------------------------------------------------------------------

Adam::Adam(const OptimizerOptions& options) : Adam("Adam", options) {}

Adam::Adam(std::string_view class_name, const OptimizerOptions& options)
    : Optimizer(class_name, 0.001, reject_foreign(options, class_name, false, true)),
      beta_1_(options.beta_1.value_or(0.9)),
      beta_2_(options.beta_2.value_or(0.999)),
      epsilon_(options.epsilon.value_or(1e-7)),
      amsgrad_(options.amsgrad.value_or(false)) {
  for (const auto& [what, v] : {std::pair{"beta_1", beta_1_}, std::pair{"beta_2", beta_2_}}) {
    if (!(v >= 0.0 && v < 1.0)) {
      throw ValueError(fmt::format("`{}` must be a float in [0, 1). Received: {}={}", what, what, v));
    }
  }
  if (!(epsilon_ >= 0.0 && std::isfinite(epsilon_))) {
    throw ValueError(fmt::format("`epsilon` must be a finite float >= 0. Received: epsilon={}", epsilon_));
  }
}

std::vector<std::string> Adam::slot_names() const {
  if (amsgrad_) return {"momentum", "velocity", "velocity_hat"};
  return {"momentum", "velocity"};
}

void Adam::build_slots(std::span<const VariablePtr> variables) {
  add_optimizer_variables(variables, {"momentum", "velocity"});
  if (amsgrad_) add_optimizer_variables(variables, {"velocity_hat"});
}

void Adam::update_shard(const ShardStep<float>& step) const {
  adam_step(step, beta_1_, beta_2_, epsilon_, amsgrad_);
}
void Adam::update_shard(const ShardStep<double>& step) const {
  adam_step(step, beta_1_, beta_2_, epsilon_, amsgrad_);
}

AdamW::AdamW(const OptimizerOptions& options) : Adam("AdamW", with_adamw_default(options)) {}

// ---- make_optimizer -----------------------------------------------------------------------

std::vector<std::string> optimizer_names() { return {"sgd", "adam", "adamw"}; }

namespace {

[[noreturn]] void unknown_optimizer(std::string_view name) {
  std::vector<std::string> quoted;
  for (const std::string& n : optimizer_names()) quoted.push_back(quote(n));
  throw ValueError(fmt::format("Could not interpret optimizer identifier: {}; valid names are {}",
                               quote(name), fmt::join(quoted, ", ")));
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const OptimizerOptions& options) {
  const std::string key = lower(name);
  if (key == "sgd") return std::make_unique<SGD>(options);
  if (key == "adam") return std::make_unique<Adam>(options);
  if (key == "adamw") return std::make_unique<AdamW>(options);
  unknown_optimizer(name);
}

std::string stable_optimizer_name(std::string_view name) {
  const std::string key = lower(name);
  if (key == "sgd") return "SGD";
  if (key == "adam") return "adam";
  if (key == "adamw") return "adamw";
  unknown_optimizer(name);
}

}  // namespace meshlayout
