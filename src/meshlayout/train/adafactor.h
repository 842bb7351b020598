// adafactor.h — keras.optimizers.Adafactor (keras/src/optimizers/adafactor.py): its options,
// its factored slots and its update, on distributed variables.
//
// Update, t = iterations + 1: lr_t = min(lr, 1/√t) (relative_step; else lr), ρ_t = min(lr_t, 1/√t),
// α_t = max(ε2, rms(θ))·ρ_t, G = g² + ε1, β_t = 1 − t^beta_2_decay; for a variable of rank >= 2
// (the last two dimensions factored): r ← β_t·r + (1−β_t)·mean(G, −1), c ← β_t·c +
// (1−β_t)·mean(G, −2), v = (r / mean(r, −1))[…, None] · c[…, None, :]; rank < 2:
// v ← β_t·v + (1−β_t)·G. Then u = g/√v, û = u / max(1, rms(u)/clip_threshold), θ −= α_t·û.
// rms(θ) is taken after the base's weight decay, as Keras. Defaults: learning_rate 0.001,
// beta_2_decay −0.8, epsilon_1 1e-30, epsilon_2 1e-3, clip_threshold 1.0, relative_step true.
// Registered as "adafactor".
//
// Slots per variable, in Keras' order r, c, velocity:
//  * r: shape[:-1], in the variable's layout without its last dimension; c: shape[:-2] +
//    shape[-1:], in the variable's layout without dimension −2 — so each device's r and c boxes
//    are exactly the rows and columns of its variable box. A rank < 2 variable gets scalar
//    placeholders (replicated zeros, never updated), as Keras;
//  * velocity: the variable's shape and layout.
// Decision: r and c are named `<ref path, '/'→'_'>_r` and `…_c`. Keras names both `var.name`
// (paths `adafactor/kernel`, the same for r and c and for every layer's kernel), which state
// saved by path could not tell apart; the order and shapes are Keras'.
// The means over a sharded dimension are exact across devices and processes: each device's
// partial sums over its box go into an array with that dimension cut into one element per
// block (the variable's axes), which a reshard replicates; every device then adds the blocks
// in block order, so replicas agree bit for bit. The RMS sums each box once and all-reduces
// across processes. Updates are collective (update_variable): every process steps the same
// variables in the same order. ZeRO-1 (shard_slots_over) is a ValueError: the factored slots
// are not in their variable's shape.
//
// Example:
//   auto opt = make_optimizer("adafactor", {.arguments = {{"clip_threshold", 0.5}}});
//   opt->apply(grads, vars);   // adafactor/dense_kernel_r (rows), …_c (columns), …_velocity
#pragma once

#include "meshlayout/train/optimizer.h"

namespace meshlayout {

/// Adafactor's own arguments.
struct AdafactorOptions {
  double beta_2_decay = -0.8;
  double epsilon_1 = 1e-30;
  double epsilon_2 = 1e-3;
  double clip_threshold = 1.0;
  bool relative_step = true;
  /// Takes the five from `options`; ValueError for any other keyword argument.
  static AdafactorOptions from(const OptimizerOptions& options);
  /// ValueError unless beta_2_decay is finite and <= 0, epsilon_1 and epsilon_2 are finite and
  /// >= 0, and clip_threshold is finite and > 0.
  void check() const;
};

class Adafactor : public Optimizer {
 public:
  /// ValueError for shard_slots_over (see above).
  explicit Adafactor(const OptimizerOptions& options = {});
  const AdafactorOptions& options() const { return options_; }
  std::vector<std::string> slot_names() const override;
  std::vector<SlotFootprint> slot_footprints(const SlotFootprint& variable) const override;
  bool updates_whole_variables() const override { return true; }
  void update_variable(const VariableStep& step) const override;
  /// InternalError: Adafactor updates whole variables.
  void update_shard(DeviceKind kind, const OptimizerShardStep& step) const override;

 protected:
  void build_slots(std::span<const VariablePtr> variables) override;

 private:
  Adafactor(const AdafactorOptions& own, const OptimizerOptions& options);
  AdafactorOptions options_;
};

}  // namespace meshlayout
