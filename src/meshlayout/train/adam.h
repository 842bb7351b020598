// adam.h — keras.optimizers.Adam (keras/src/optimizers/adam.py): its options and update rule.
//
// Update, t = iterations + 1: m += (g−m)(1−β1); v += (g²−v)(1−β2); α = lr·√(1−β2^t)/(1−β1^t);
// θ −= α·m/(√v + ε) (amsgrad: v̂ = max(v̂, v) in place of v). Slots, interleaved per variable:
// [momentum, velocity]…, then velocity_hat… with amsgrad. Defaults: learning_rate 0.001,
// beta_1 0.9, beta_2 0.999 (each in [0, 1)), epsilon 1e-7 (>= 0), amsgrad false.
// Registered as "adam".
//
// Example:
//   Adam opt({.learning_rate = 1e-3, .amsgrad = true});
//   opt.apply(grads, vars);   // adam/dense_kernel_momentum, adam/dense_kernel_velocity, …
#pragma once

#include "meshlayout/train/optimizer.h"

namespace meshlayout {

/// Adam's (and AdamW's) own arguments.
struct AdamOptions {
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  bool amsgrad = false;
  /// Takes beta_1, beta_2, epsilon, amsgrad from `options` for class `class_name`; ValueError
  /// for any other keyword argument.
  static AdamOptions from(const OptimizerOptions& options, std::string_view class_name = "Adam");
  /// ValueError unless beta_1, beta_2 are in [0, 1) and epsilon is finite and >= 0.
  void check() const;
};

class Adam : public Optimizer {
 public:
  explicit Adam(const OptimizerOptions& options = {});
  const AdamOptions& options() const { return options_; }
  double beta_1() const { return options_.beta_1; }
  double beta_2() const { return options_.beta_2; }
  double epsilon() const { return options_.epsilon; }
  bool amsgrad() const { return options_.amsgrad; }
  std::vector<std::string> slot_names() const override;
  void update_shard(DeviceKind kind, const OptimizerShardStep& step) const override;

 protected:
  /// For AdamW: `class_name` names it; `own` is already parsed from `options`.
  Adam(std::string_view class_name, const AdamOptions& own, const OptimizerOptions& options);
  void build_slots(std::span<const VariablePtr> variables) override;

 private:
  AdamOptions options_;
};

}  // namespace meshlayout
