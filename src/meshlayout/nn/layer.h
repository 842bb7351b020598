// layer.h — Tensor (symbolic or concrete) and Layer, the base of every layer and model.
//
// A Tensor is either concrete (a distributed Array) or symbolic (a shape, plus the layer call
// that produced it: the functional API's KerasTensor). Calling a layer on a symbolic tensor
// builds the layer (creating its weights — lazy under LayoutMap::scope()) and returns a
// symbolic output; calling it on a concrete tensor runs the forward pass.
// Layer names are unique per class and auto-generated Keras-style: dense, dense_1, …; a model
// without a name takes its C++ class name in snake case (MyModel → my_model, my_model_1).
// Keras 3 paths (name_scope.h): a layer opens its name scope around build and call; the first
// time, it records the enclosing path as its parent and re-enters there ever after, so weights
// built in build() are "<parent>/<layer>/<var>" while weights added in a constructor are
// "<enclosing scope>/<layer>/<var>" (usually just "<layer>/<var>").
//
// Layers live in their own files (dense.h, embedding.h, …); activations in activation.h.
//
// Example (Dense: dense.h):
//   Tensor inputs = Input({10}, /*batch_size=*/10);
//   auto d1 = std::make_shared<Dense>(20, DenseOptions{.name = "d1"});
//   Tensor x = (*d1)(inputs);            // builds d1: kernel (10, 20), bias (20,)
//   Gradients grads;                     // training (gradients.h): the backward of a call
//   Array dx = d1->backward(xa, dy, grads);   // dx in xa's layout; grads.find(*d1->kernel())
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/nn/gradients.h"
#include "meshlayout/nn/lora.h"
#include "meshlayout/nn/name_scope.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

class Layer;

/// A concrete distributed value, or a symbolic one (shape and producing layer call).
class Tensor {
 public:
  Tensor(Array value);  // NOLINT: implicit, a concrete tensor
  /// A symbolic tensor of `shape` produced by `layer` from `input` (both null for an Input).
  static Tensor symbolic(Shape shape, std::shared_ptr<Layer> layer = nullptr,
                         std::shared_ptr<const Tensor> input = nullptr);
  /// A symbolic tensor produced by a layer of several inputs (Add, Concatenate, a model).
  static Tensor symbolic(Shape shape, std::shared_ptr<Layer> layer,
                         std::vector<std::shared_ptr<const Tensor>> inputs);

  bool is_symbolic() const { return value_ == nullptr; }
  const Shape& shape() const { return shape_; }
  /// The Array of a concrete tensor; FailedPreconditionError for a symbolic one.
  const Array& value() const;
  const std::shared_ptr<Layer>& producer() const { return producer_; }
  /// The first input of the producing call (null for an Input or a concrete tensor).
  std::shared_ptr<const Tensor> input() const { return inputs_.empty() ? nullptr : inputs_[0]; }
  /// Every input of the producing call, in order.
  const std::vector<std::shared_ptr<const Tensor>>& inputs() const { return inputs_; }
  /// The identity of a symbolic tensor, shared by its copies (a node of the functional graph);
  /// null for a concrete tensor.
  const void* node() const { return node_.get(); }

 private:
  Tensor() = default;
  Shape shape_;
  std::shared_ptr<const Array> value_;
  std::shared_ptr<Layer> producer_;
  std::vector<std::shared_ptr<const Tensor>> inputs_;
  std::shared_ptr<const char> node_;
};

/// keras.Input(shape, batch_size): a symbolic tensor of shape (batch_size, *shape).
Tensor Input(const Shape& shape, int64_t batch_size);

class Layer : public std::enable_shared_from_this<Layer> {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const;
  /// The dtype of the layer's floating weights and of its computation (Keras' dtype policy,
  /// float32 or float64 here): floatx() when the layer was constructed (floatx.h).
  DType dtype() const { return dtype_; }
  /// Keras 3 layer path ("sequential/d1", "my_model/dense"): the parent path recorded when the
  /// layer first opened its scope, then its name; the name until then.
  std::string path() const;
  bool built() const { return built_; }
  /// Opens the layer's scope and builds it for `input_shape` unless built (keras layer.build()
  /// called from a parent's build()). Lazy weights stay lazy: the parent materialises them.
  void maybe_build(const Shape& input_shape);
  /// keras layer.build(input_shape) called on a layer of its own: maybe_build, then, as after a
  /// first call, a layer built under a Keras 3 distribution outside any model (no model being
  /// built, no enclosing layer build, no LayoutMap scope) gets its variables' layouts from the
  /// distribution at once (keyed by their paths, e.g. "dense/kernel") and is allocated.
  void build_standalone(const Shape& input_shape);

  /// Builds on the first call (from the input's shape), then runs the layer: a symbolic input
  /// gives a symbolic output; a concrete one the forward pass. A layer built so outside any
  /// model under a distribution takes its layouts at once (build_standalone).
  virtual Tensor operator()(const Tensor& x);
  /// Calls the layer on a list of inputs (keras layer([a, b])): merge layers (Add, Concatenate,
  /// …) and functional models of several inputs take more than one; any other layer exactly
  /// one (ValueError naming the layer and the count otherwise).
  virtual Tensor apply(const std::vector<Tensor>& inputs);
  /// The forward pass on a concrete array, in the layer's scope, building it first if needed
  /// (as the first call does): for layers composed inside another layer's call (attention's
  /// projections).
  Array call_on(const Array& x);

  /// The backward of a call (gradients.h): x the call's input, dy = dL/dy in the call's output
  /// layout; returns dL/dx in x's layout and accumulates dL/dw of every weight (own and of
  /// sub-layers) into `grads`, summed over data-parallel replicas. Recomputes what it needs
  /// from x. Collective. Default: FailedPreconditionError naming the layer (no backward yet).
  virtual Array backward(const Array& x, const Array& dy, Gradients& grads);
  /// The backward of a call on several inputs (merge layers, functional models of several
  /// inputs): dL/d input i in input i's layout, in order. Default: one input →
  /// {backward(*inputs[0], dy, grads)}; more → FailedPreconditionError naming the layer.
  virtual std::vector<Array> backward_inputs(std::span<const Array* const> inputs, const Array& dy,
                                             Gradients& grads);
  /// The forward pass again on a concrete input, for a backward pass that needs the outputs of
  /// a model's inner layers: as calling the layer on x (its "<path>/output" relayout included)
  /// but without side effects — Dropout reuses the mask of its last training call instead of
  /// drawing a new one. The layer must be built. Collective.
  virtual Array recompute(const Array& x);
  /// recompute for a call on several inputs (merge layers, functional models). Default: one
  /// input → recompute(*inputs[0]); more → FailedPreconditionError naming the layer.
  virtual Array recompute_inputs(std::span<const Array* const> inputs);

  /// Keras' `training` argument, kept as a mode: layers that compute differently in training
  /// (Dropout, BatchNormalization) follow it; the default is inference. Sets every sub-layer
  /// too; fit() turns it on for its steps and off again.
  virtual void set_training(bool training);

  /// (attribute name, variable) of the weights this layer created itself, in creation order.
  const std::vector<std::pair<std::string, VariablePtr>>& own_weights() const { return weights_; }
  /// Every variable of this layer and its sub-layers in Keras' order (Layer.variables): own
  /// trainable, own non-trainable, then each sub-layer's, recursively; each variable once.
  std::vector<VariablePtr> variables() const;
  /// Keras Layer.weights: variables() without RNG state (SeedGenerator state is a variable but
  /// not a weight), in the same order. Model::summary() counts these.
  std::vector<VariablePtr> weights() const;
  /// The regularisation losses of the trainable weights of this layer and its sub-layers that
  /// have a regulariser, each weight once (keras Layer.losses; a frozen weight adds none).
  /// Collective under several processes.
  std::vector<double> losses() const;
  /// Sub-layers under their attribute paths ("d1", "blocks.0"): the tracked ones by default.
  virtual std::vector<std::pair<std::string, std::shared_ptr<Layer>>> sublayers() const {
    return tracked_;
  }

  virtual Shape compute_output_shape(const Shape& input_shape) const = 0;

 protected:
  /// `class_name` is the snake_case class name used for automatic names ("dense"); empty: the
  /// C++ class name in snake case, resolved at the first use of name(). ValueError (Keras'
  /// message) if `name` contains '/'.
  Layer(std::string_view class_name, std::string name);
  virtual void build(const Shape& input_shape) = 0;
  virtual Array call(const Array& x) = 0;
  /// Creates a weight, its Keras 3 path under the layer's scope. `attribute` is its Keras 2
  /// attribute name (the object-path key: a weight "kernel" kept as `_weight` is keyed
  /// "<layer>._weight"); default: the variable name. The weight is lazy while a LayoutMap scope
  /// or a distribution is current on this thread, else materialised at once, replicated on a
  /// one-device mesh (cpu:0). A spec without a dtype takes the layer's dtype().
  VariablePtr add_weight(VariableSpec spec, std::string attribute = "");
  void set_built() { built_ = true; }
  /// The layer's name scope (keras Layer._open_name_scope): records the parent path the first
  /// time.
  NameScope open_name_scope();
  /// After a build outside any model: see build_standalone.
  void materialize_if_standalone();
  /// keras enable_lora's weights for `kernel` (lora.h): ValueError naming the layer if the
  /// kernel is null (not built), `current` is enabled already, or rank < 1; then creates
  /// lora_kernel_a / lora_kernel_b in the layer's scope with `regularizer`, laid out as lora.h
  /// says, and freezes the kernel.
  LoraWeights add_lora_weights(const VariablePtr& kernel, const LoraWeights& current, int64_t rank,
                               std::optional<double> lora_alpha, const Initializer& a_initializer,
                               const Initializer& b_initializer,
                               const std::optional<Regularizer>& regularizer);
  /// Registers a sub-layer under an attribute name (C++ has no reflection).
  template <typename L>
  std::shared_ptr<L> track(std::string attr, std::shared_ptr<L> layer) {
    (void)name();  // an automatic name is taken at construction, as in Keras
    tracked_.emplace_back(std::move(attr), layer);
    on_track(layer);
    return layer;
  }
  /// Registers a list of sub-layers: their object paths are attr.0, attr.1, …
  template <typename L>
  std::vector<std::shared_ptr<L>> track_list(const std::string& attr,
                                             std::vector<std::shared_ptr<L>> layers) {
    for (size_t i = 0; i < layers.size(); ++i) track(attr + "." + std::to_string(i), layers[i]);
    return layers;
  }
  virtual void on_track(const std::shared_ptr<Layer>&) {}
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> tracked_;

 private:
  mutable std::string name_;
  DType dtype_;
  std::optional<std::string> parent_path_;
  bool built_ = false;
  std::vector<std::pair<std::string, VariablePtr>> weights_;
};

/// While one lives on this thread, layers built standalone leave their lazy weights to the
/// model being built (which checks every layout before allocating anything).
class [[nodiscard]] ModelBuildGuard {
 public:
  ModelBuildGuard();
  ~ModelBuildGuard();
  ModelBuildGuard(const ModelBuildGuard&) = delete;
  ModelBuildGuard& operator=(const ModelBuildGuard&) = delete;
  /// True while some model on this thread is being built.
  static bool active();
};

/// "MyModel" → "my_model" (keras.src.utils.naming.to_snake_case).
std::string to_snake_case(std::string_view class_name);

/// keras.src.utils.naming.auto_name: to_snake_case(prefix), numbered by a process-wide counter
/// per name that layers and optimizers share ("adam", "adam_1", …; Dense's "dense", "dense_1",
/// …); a name given explicitly takes no number. Thread-safe.
std::string auto_name(std::string_view prefix);

/// Forgets automatic layer and optimizer names (keras.backend.clear_session()): every counter
/// of auto_name starts again at 0.
void clear_session();

}  // namespace meshlayout
