// model.h — Model: subclassed, Sequential and Functional models whose variables are born
// sharded (seeds 000–002). A model records the LayoutMap current when it is constructed
// (LayoutMap::scope()); its variables are created lazily and materialised, each device filling
// only its own box, once their paths are final:
//   Functional  Model::functional(inputs, outputs)   at construction
//   Sequential  Sequential(layers, {.input_shape})    at construction, or at the first call
//   subclassed  class M : public Model { … }           at the first call (in or out of the scope)
// Keys (Keras 2 object paths): functional/sequential "<layer name>.<attr>"; subclassed the
// attribute path "d1.kernel", "blocks.0.kernel". Layout: map[object path], else replicated on
// the map's mesh. Every variable's layout is checked before any memory is allocated.
// Keras 3 paths come from name scopes (name_scope.h): subclassed "my_model/d1/kernel", nested
// "outer_model/inner_block/d1/kernel", sequential "sequential/d1/kernel", functional
// "d1/kernel" (its layers are built where they are first called). variables() lists them in
// Keras' order.
//
// Example (subclassed):
//   class SubclassModel : public Model {
//    public:
//     SubclassModel() { d1 = track("d1", std::make_shared<Dense>(1000));
//                       d2 = track("d2", std::make_shared<Dense>(1000)); }
//     Tensor call(const Tensor& x) override { return (*d2)((*d1)(x)); }
//     std::shared_ptr<Dense> d1, d2;
//   };
//   std::shared_ptr<SubclassModel> model;
//   { LayoutMapScope scope = layout_map.scope(); model = std::make_shared<SubclassModel>(); }
//   Tensor results = (*model)(inputs);                       // builds, materialises, runs
//   model->d1->kernel()->layout() == layout_1;
//   Gradients grads;
//   Array dx = sequential->backward(x, dy, grads);   // every layer's weights in grads
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout {

/// The compiled loss as the Trainer names it to a model's own training path: Keras' canonical
/// loss name and its arguments.
struct CompiledLoss {
  std::string name;  // "sparse_categorical_crossentropy", "mean_squared_error", …
  bool from_logits = false;
  double label_smoothing = 0.0;
};

class Model : public Layer {
 public:
  /// keras.Model(inputs, outputs): the layers between them, in order (layers()[0] is the
  /// input layer). Materialises every variable with the recorded map's layouts.
  static std::shared_ptr<Model> functional(const Tensor& inputs, const Tensor& outputs,
                                           std::string name = "");
  /// keras.Model([a, b], outputs): a graph of several inputs (joined by merge layers such as
  /// Add or Concatenate); call it with model->apply({x, y}). layers() starts with one input
  /// layer per input, then every layer once, each after the layers its inputs come from.
  /// ValueError if the outputs depend on a tensor that is not one of `inputs`.
  static std::shared_ptr<Model> functional(const std::vector<Tensor>& inputs, const Tensor& outputs,
                                           std::string name = "");

  /// Functional/sequential: the layers in order; subclassed: the tracked layers.
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  /// The LayoutMap current when the model was constructed, if any.
  const std::optional<LayoutMap>& layout_map() const { return layout_map_; }
  /// The Keras 3 distribution current when the model was constructed (used when no LayoutMap
  /// scope was), if any.
  const std::shared_ptr<const Distribution>& distribution() const { return distribution_; }

  Tensor operator()(const Tensor& x) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> sublayers() const override;

  /// Keras model.summary() with layouts: see model_summary.h.
  std::string summary() const;

  /// The forward pass; subclassed models override it, composing their tracked layers.
  virtual Tensor call(const Tensor& x);

  /// The backward of a call of a Sequential or functional model (Layer::backward): recomputes
  /// every layer's input by a forward pass (Layer::recompute: Dropout reuses its last mask),
  /// then runs the layers' backward in reverse order — a node of several inputs through
  /// backward_inputs, the gradients of a value read by several nodes summed — so every
  /// variable's gradient comes from one call. Subclassed models: FailedPreconditionError (their
  /// call is arbitrary code; they override backward). Collective.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;
  /// The layers' recompute in order (Sequential); Layer::recompute otherwise.
  Array recompute(const Array& x) override;

  /// A training step's loss and gradients in one pass of the model's own, for models with a
  /// fused path (the Llama's cross-entropy straight from its vocabulary-sharded logits): the
  /// loss of (x, y) as `loss` defines it, every variable's gradient accumulated into `grads`.
  /// std::nullopt (the default) when the model has no such path for `loss`: the Trainer then
  /// runs the call, the loss and backward(). Collective.
  virtual std::optional<double> fused_loss_and_gradients(const Array& x, const Array& y,
                                                         const CompiledLoss& loss,
                                                         Gradients& grads);

 protected:
  /// `class_name` gives the automatic name ("sequential"); empty: the C++ class name in snake
  /// case (class MyModel → "my_model", "my_model_1", …).
  explicit Model(std::string name = "", std::string_view class_name = "");
  void on_track(const std::shared_ptr<Layer>& layer) override { layers_.push_back(layer); }

  enum class Kind { kSubclassed, kSequential, kFunctional };
  Kind kind_ = Kind::kSubclassed;
  std::vector<std::shared_ptr<Layer>> layers_;
  std::optional<LayoutMap> layout_map_;
  std::shared_ptr<const Distribution> distribution_;
  std::optional<Shape> output_shape_;
  std::optional<Shape> input_shape_;  // the shape the model was built on (batch 1)

  /// Traces the model on a symbolic input of `input_shape` (creating lazy weights under the
  /// recorded map), then materialises every lazy variable — unless an enclosing model is being
  /// built with a map or distribution: then that model does, with its own.
  void build_and_materialize(const Shape& input_shape);
  /// In the model's name scope: builds it (build_and_materialize) unless built.
  void build_in_scope(const Shape& input_shape);
  void materialize_variables();

 private:
  void build(const Shape&) override {}
  Array call(const Array& x) override;
};

struct SequentialOptions {
  std::string name;                  // "sequential", "sequential_1", … when empty
  std::optional<Shape> input_shape;  // without the batch dimension; builds at construction
};

/// keras.Sequential(layers).
class Sequential : public Model {
 public:
  explicit Sequential(std::vector<std::shared_ptr<Layer>> layers, SequentialOptions options = {});
  Tensor call(const Tensor& x) override;

  /// keras Sequential.add: appends `layer`; on a built model (Keras rebuilds) the layer is built
  /// on the model's output, in its name scope ("sequential/dense_2/kernel"), and its variables
  /// are materialised under the model's recorded LayoutMap or distribution. ValueError (Keras'
  /// message) for a null layer or a name another layer of the model has; the model is left as
  /// it was when the layer cannot build.
  void add(std::shared_ptr<Layer> layer);
  /// keras Sequential.pop: removes and returns the last layer (the model's output shape follows).
  /// ValueError "There are no layers in the model." when empty.
  std::shared_ptr<Layer> pop();
};

}  // namespace meshlayout
