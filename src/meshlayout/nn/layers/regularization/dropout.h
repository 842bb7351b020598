// dropout.h — keras.layers.Dropout on distributed arrays, with a Keras 3 SeedGenerator.
//
// In training mode (set_training(true); the default is inference, the identity) each element is
// zeroed with probability `rate` and the kept ones are divided by (1 - rate). The mask of
// element g (row-major global index) is a pure function of (seed, step counter, g):
//   keep(g) = word[g % 4] of Philox4x32-10 block (counter = (g / 4, step), key = seed)
//             < (1 - rate) × 2^32
// so the same input gives bit for bit the same output on every mesh and layout, and each device
// draws only the words of its own box (no communication; replicas draw the same words).
//
// RNG state (Keras 3 SeedGenerator): a non-trainable I64 variable `seed_generator_state` of
// shape (2,) holding [seed, counter], owned by a SeedGenerator sub-layer (auto name
// "seed_generator", "seed_generator_1", …) created in the constructor, as Keras creates it in
// Dropout.__init__ when rate > 0. It is created with add_weight, so a model lays it out like any
// variable. Paths inside a subclassed model that tracks the Dropout as "drop": object path
// "drop.seed_generator.seed_generator_state" (the checkpoint key), scope path
// "seed_generator/seed_generator_state" (created in the constructor, outside any name scope, as
// in Keras 3). Its LayoutMap::scope() key is "" (layout_key(), Keras 2 / seed 002), so only an
// exact "" key or a rule matching the empty string lays it out; otherwise it is replicated.
// Each training call reads the state (one gather of 16 bytes), uses its counter and assigns
// [seed, counter + 1]. Initial value: [seed, 0]. A variable materialised at creation (no scope)
// holds it at once; a lazy one is materialised by its model with zeros (initializers fill
// every element alike) and gets [seed, 0] at the first use, unless something else was assigned.
// Dtype: the layer's (floatx() at construction, floatx.h), F32 or F64 (refused at build
// otherwise); x and dy must be of it (no cast). The mask is the same in either dtype.
// Not supported: noise_shape.
//
// Example:
//   auto drop = std::make_shared<Dropout>(0.1, DropoutOptions{.seed = 42});
//   drop->set_training(true);
//   Tensor y = (*drop)(x);   // state [42, 0] → [42, 1]
//   Array dx = drop->backward(x, dy, grads);   // dy through the same mask (step 0)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

/// keras.random.SeedGenerator as a layer holding one variable, `seed_generator_state`.
class SeedGenerator : public Layer {
 public:
  explicit SeedGenerator(int64_t seed, std::string name = "");
  int64_t seed() const { return seed_; }
  const VariablePtr& state() const { return state_; }
  /// [seed, counter] of the current state, then the state becomes [seed, counter + 1].
  /// A collective (gathers and assigns the state). FailedPreconditionError while it is lazy.
  std::pair<int64_t, int64_t> next();
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }

 protected:
  void build(const Shape&) override {}
  /// Not a computation: FailedPreconditionError.
  Array call(const Array& x) override;

 private:
  int64_t seed_;
  bool seeded_ = false;
  VariablePtr state_;
};

struct DropoutOptions {
  std::string name;              // automatic ("dropout", "dropout_1", …) when empty
  std::optional<uint64_t> seed;  // absent: the global seed (set_global_seed()), as initializers
};

class Dropout : public Layer {
 public:
  /// ValueError unless 0 <= rate < 1.
  explicit Dropout(double rate, DropoutOptions options = {});
  double rate() const { return rate_; }
  /// Training mode drops; inference (the default) is the identity.
  void set_training(bool training) override { training_ = training; }
  bool training() const { return training_; }
  /// Null when rate is 0 (Keras creates no generator then).
  const std::shared_ptr<SeedGenerator>& seed_generator() const { return seed_generator_; }
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> sublayers() const override;
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  /// The backward of the last call (Layer::backward): dy with the mask of the last training
  /// call — the (seed, step) it drew, so the same elements — zeroed and the kept ones divided
  /// by (1 - rate), in x's layout; the identity (a copy in x's layout) in inference mode or at
  /// rate 0. Draws nothing. FailedPreconditionError in training mode before any training call;
  /// ValueError for x or dy not of the layer's dtype (naming both) and one shape.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;
  /// The last training call's output again (its mask, no new draw): for a model's backward.
  Array recompute(const Array& x) override;

 protected:
  /// ValueError unless the layer's dtype is F32 or F64 (naming it).
  void build(const Shape&) override;
  /// ValueError if x is not of the layer's dtype (naming both).
  Array call(const Array& x) override;

 private:
  /// Scales y in place by the mask of (seed, step).
  void apply_mask(Array& y, int64_t seed, int64_t step) const;
  double rate_;
  DropoutOptions options_;
  bool training_ = false;
  std::optional<std::pair<int64_t, int64_t>> last_draw_;  // (seed, step) of the last training call
  std::shared_ptr<SeedGenerator> seed_generator_;
};

}  // namespace meshlayout
