// adagrad.h — keras.optimizers.Adagrad (keras/src/optimizers/adagrad.py): its options and
// update rule.
//
// Update: acc += g²; θ −= lr·g/√(acc + ε). Slot: accumulator, born holding
// initial_accumulator_value. Defaults: learning_rate 0.001, initial_accumulator_value 0.1
// (>= 0), epsilon 1e-7. Registered as "adagrad" (Keras <= 3.14: auto_name, "adagrad").
//
// Example:
//   auto opt = make_optimizer("adagrad", {.learning_rate = 0.01, .arguments =
//   {{"initial_accumulator_value", 0.5}}}); opt->apply(grads, vars);   //
//   adagrad/dense_kernel_accumulator, …
#pragma once

#include "meshlayout/train/optimizer.h"

namespace meshlayout {

/// Adagrad's own arguments.
struct AdagradOptions {
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  /// Takes initial_accumulator_value and epsilon from `options`; ValueError for any other
  /// keyword argument.
  static AdagradOptions from(const OptimizerOptions& options);
  /// ValueError unless both are finite and >= 0.
  void check() const;
};

class Adagrad : public Optimizer {
 public:
  explicit Adagrad(const OptimizerOptions& options = {});
  const AdagradOptions& options() const { return options_; }
  std::vector<std::string> slot_names() const override;
  void update_shard(DeviceKind kind, const OptimizerShardStep& step) const override;

 protected:
  void build_slots(std::span<const VariablePtr> variables) override;

 private:
  Adagrad(const AdagradOptions& own, const OptimizerOptions& options);
  AdagradOptions options_;
};

}  // namespace meshlayout
