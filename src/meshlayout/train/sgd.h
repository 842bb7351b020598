// sgd.h — keras.optimizers.SGD (keras/src/optimizers/sgd.py): its options and update rule.
//
// Update: m ← μ·m − lr·g; θ += m (nesterov: θ += μ·m − lr·g with the new m); μ = 0: θ −= lr·g
// with no slot. Slot: `momentum` only if momentum != 0. Defaults: learning_rate 0.01,
// momentum 0.0 (in [0, 1]), nesterov false. Registered as "sgd" (Keras <= 3.14 name "SGD").
//
// Example:
//   SGD opt({.learning_rate = 0.05, .momentum = 0.9, .nesterov = true});
//   opt.apply(grads, vars);              // sgd/dense_kernel_momentum, …
//   make_optimizer("sgd", {.momentum = 0.9});
#pragma once

#include "meshlayout/train/optimizer.h"

namespace meshlayout {

/// SGD's own arguments.
struct SGDOptions {
  double momentum = 0.0;
  bool nesterov = false;
  /// Takes momentum and nesterov from `options`; ValueError for any other keyword argument.
  static SGDOptions from(const OptimizerOptions& options);
  /// ValueError unless momentum is in [0, 1].
  void check() const;
};

class SGD : public Optimizer {
 public:
  explicit SGD(const OptimizerOptions& options = {});
  const SGDOptions& options() const { return options_; }
  double momentum() const { return options_.momentum; }
  bool nesterov() const { return options_.nesterov; }
  std::vector<std::string> slot_names() const override;
  void update_shard(DeviceKind kind, const OptimizerShardStep& step) const override;

 protected:
  void build_slots(std::span<const VariablePtr> variables) override;

 private:
  SGD(const SGDOptions& own, const OptimizerOptions& options);
  SGDOptions options_;
};

}  // namespace meshlayout
