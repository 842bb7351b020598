// rmsprop.h — keras.optimizers.RMSprop (keras/src/optimizers/rmsprop.py): its options and
// update rule.
//
// Update: v ← ρ·v + (1−ρ)·g²; centered: a ← ρ·a + (1−ρ)·g, d = v − a² + ε, else d = v + ε;
// Δ = lr·g/√d; momentum μ > 0: m ← μ·m + Δ, θ −= m; else θ −= Δ. Slots, each made for every
// variable before the next: velocity…, momentum… (μ > 0), average_gradient… (centered).
// Defaults: learning_rate 0.001, rho 0.9, momentum 0.0, epsilon 1e-7, centered false.
// Registered as "rmsprop" (Keras <= 3.14 name "rmsprop"; auto-named "rm_sprop", as Keras'
// to_snake_case("RMSprop")).
//
// Example:
//   auto opt = make_optimizer("rmsprop", {.momentum = 0.9, .arguments = {{"rho", 0.95},
//   {"centered", true}}}); opt->apply(grads, vars);   // rm_sprop/dense_kernel_velocity,
//   …_momentum, …_average_gradient
#pragma once

#include "meshlayout/train/optimizer.h"

namespace meshlayout {

/// RMSprop's own arguments.
struct RMSpropOptions {
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  /// Takes rho, momentum, epsilon, centered from `options`; ValueError for any other keyword
  /// argument.
  static RMSpropOptions from(const OptimizerOptions& options);
  /// ValueError unless rho and momentum are in [0, 1] and epsilon is finite and >= 0.
  void check() const;
};

class RMSprop : public Optimizer {
 public:
  explicit RMSprop(const OptimizerOptions& options = {});
  const RMSpropOptions& options() const { return options_; }
  std::vector<std::string> slot_names() const override;
  void update_shard(DeviceKind kind, const OptimizerShardStep& step) const override;

 protected:
  void build_slots(std::span<const VariablePtr> variables) override;

 private:
  RMSprop(const RMSpropOptions& own, const OptimizerOptions& options);
  RMSpropOptions options_;
};

}  // namespace meshlayout
