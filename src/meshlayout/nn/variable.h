// variable.h — Variable: a named, typed, shaped model weight whose storage is an Array laid
// out over a mesh. It carries both Keras names (DESIGN §2 "Variable paths"):
//   object_path()  Keras 2 key used by LayoutMap::scope()   e.g. "d1.kernel", "blocks.0.kernel"
//   path()         Keras 3 scope path used by ModelParallel  e.g. "my_model/d1/kernel"
// A variable created under LayoutMap::scope() is lazy: shape, dtype and initializer, no
// storage, until materialize() gives it a layout — then each device allocates and fills only
// its own box (counter-based initializers: the values do not depend on the layout).
//
// Example:
//   std::shared_ptr<Variable> v;
//   { NameScope s("d1"); v = std::make_shared<Variable>(VariableSpec{.name = "kernel", .shape =
//   {10, 20}}); } v->path() == "d1/kernel";  v->set_object_path("d1.kernel");
//   v->materialize(TensorLayout({None, "model"}, mesh));   // each device fills its box
//   HostTensor whole = v->value().gather();
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/nn/regularizer.h"

namespace meshlayout {

/// A run of the last axis filled by its own initializer (see VariableSpec::segments).
struct InitializerSegment {
  int64_t length;
  Initializer initializer;
};

struct VariableSpec {
  std::string name;  // the attribute name inside its layer, e.g. "kernel"
  Shape shape;
  /// Unset: the creating layer's dtype (Layer::add_weight), else floatx() (floatx.h), as a
  /// Keras Variable without a dtype. Set it for non-float weights (counters, RNG state).
  std::optional<DType> dtype;
  Initializer initializer = Initializer::zeros();
  bool trainable = true;
  /// Added to the layer's losses once the variable has a value.
  std::optional<Regularizer> regularizer;
  /// An explicit layout: wins over LayoutMap rules and distributions (Keras >= 3.10).
  std::optional<TensorLayout> layout;
  /// RNG state (a SeedGenerator's): Keras 2 maps it with the object path "" (layout_key()).
  bool rng_state = false;
  /// When not empty, the last axis is cut into these runs (their lengths must add up to it),
  /// each filled as a tensor of its own by its initializer, and `initializer` is unused: the
  /// Keras LSTM bias with unit_forget_bias is [zeros(u), ones(u), zeros(2u)].
  std::vector<InitializerSegment> segments;
};

class Variable {
 public:
  /// path() is current_path() + "/" + name (just the name outside any name scope), as a Keras 3
  /// Variable. ValueError (Keras' message) if the name contains '/'.
  explicit Variable(VariableSpec spec);

  const std::string& name() const { return spec_.name; }
  const Shape& shape() const { return spec_.shape; }
  DType dtype() const { return *spec_.dtype; }
  bool trainable() const { return spec_.trainable; }
  /// Freezes or unfreezes the variable (LoRA freezes the kernel it adapts).
  void set_trainable(bool trainable) { spec_.trainable = trainable; }
  const Initializer& initializer() const { return spec_.initializer; }
  const std::optional<Regularizer>& regularizer() const { return spec_.regularizer; }
  /// The explicit layout given at creation, if any.
  const std::optional<TensorLayout>& explicit_layout() const { return spec_.layout; }
  /// True for RNG state (a SeedGenerator's): a Keras variable but not a weight.
  bool is_rng_state() const { return spec_.rng_state; }
  /// The regulariser's value on the current value (0 without one). Needs a value.
  double regularization_loss() const;

  /// Keras 2 object path (the LayoutMap::scope() key); empty until the path is final.
  const std::string& object_path() const { return object_path_; }
  /// Keras 3 scope path (the ModelParallel key), fixed at creation.
  const std::string& path() const { return path_; }
  void set_paths(std::string object_path, std::string path);
  void set_object_path(std::string object_path) { object_path_ = std::move(object_path); }
  /// The Keras 2 LayoutMap key: the object path, "" for RNG state (seed 002).
  std::string layout_key() const { return spec_.rng_state ? std::string() : object_path_; }

  /// True while the variable has no storage (created under a scope, not yet materialised).
  bool is_lazy() const { return !value_.has_value(); }
  /// The layout given at materialisation; std::nullopt while lazy.
  std::optional<TensorLayout> layout() const;

  /// The distributed value; FailedPreconditionError naming the variable while it is lazy.
  const Array& value() const;
  /// The value for in-place writes into its shards (checkpoint loads: load_model). Same
  /// error while lazy.
  Array& mutable_value() { return const_cast<Array&>(value()); }

  /// Creates the storage under `layout` (its mesh must be set): each local device allocates
  /// and fills only its box. ValueError naming the variable path, its shape and the layout if
  /// the layout does not fit (checked before any memory is allocated); FailedPreconditionError
  /// if the variable is materialised already.
  void materialize(const TensorLayout& layout, std::shared_ptr<Runtime> runtime = nullptr,
                   bool strict = false);

  /// Replaces the value, keeping the layout (a host tensor is distributed into it, an Array is
  /// resharded into it). ValueError on a shape or dtype mismatch.
  void assign(const HostTensor& value);
  void assign(const Array& value);

  /// "variable 'd1.kernel'" (or the Keras 3 path, or the name) for messages.
  std::string describe() const;

 private:
  VariableSpec spec_;
  std::string object_path_;
  std::string path_;
  std::optional<Array> value_;
};

using VariablePtr = std::shared_ptr<Variable>;

}  // namespace meshlayout
