// lion.h — keras.optimizers.Lion (keras/src/optimizers/lion.py): its options and update rule.
//
// Update: θ −= lr·sign(β1·m + (1−β1)·g); then m ← β2·m + (1−β2)·g. Slot: momentum.
// Defaults: learning_rate 0.001, beta_1 0.9 (in (0, 1], as Keras), beta_2 0.99 (in [0, 1]).
// Registered as "lion".
//
// Example:
//   auto opt = make_optimizer("lion", {.learning_rate = 1e-4, .weight_decay = 0.1, .beta_1 =
//   0.95}); opt->apply(grads, vars);   // lion/dense_kernel_momentum, …
#pragma once

#include "meshlayout/train/optimizer.h"

namespace meshlayout {

/// Lion's own arguments.
struct LionOptions {
  double beta_1 = 0.9;
  double beta_2 = 0.99;
  /// Takes beta_1 and beta_2 from `options`; ValueError for any other keyword argument.
  static LionOptions from(const OptimizerOptions& options);
  /// ValueError unless beta_1 is in (0, 1] and beta_2 in [0, 1].
  void check() const;
};

class Lion : public Optimizer {
 public:
  explicit Lion(const OptimizerOptions& options = {});
  const LionOptions& options() const { return options_; }
  std::vector<std::string> slot_names() const override;
  void update_shard(DeviceKind kind, const OptimizerShardStep& step) const override;

 protected:
  void build_slots(std::span<const VariablePtr> variables) override;

 private:
  Lion(const LionOptions& own, const OptimizerOptions& options);
  LionOptions options_;
};

}  // namespace meshlayout
