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
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout {

class Model : public Layer {
 public:
  /// keras.Model(inputs, outputs): the layers between them, in order (layers()[0] is the
  /// input layer). Materialises every variable with the recorded map's layouts.
  static std::shared_ptr<Model> functional(const Tensor& inputs, const Tensor& outputs,
                                           std::string name = "");

  /// Functional/sequential: the layers in order; subclassed: the tracked layers.
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  /// Every variable, in layer order.
  std::vector<VariablePtr> variables() const;
  /// The LayoutMap current when the model was constructed, if any.
  const std::optional<LayoutMap>& layout_map() const { return layout_map_; }
  /// The Keras 3 distribution current when the model was constructed (used when no LayoutMap
  /// scope was), if any.
  const std::shared_ptr<const Distribution>& distribution() const { return distribution_; }

  Tensor operator()(const Tensor& x) override;
  Shape compute_output_shape(const Shape& input_shape) const override;
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> sublayers() const override;

  /// The forward pass; subclassed models override it, composing their tracked layers.
  virtual Tensor call(const Tensor& x);

 protected:
  explicit Model(std::string name = "", std::string_view class_name = "model");
  /// Registers a sub-layer under an attribute name (C++ has no reflection).
  template <typename L>
  std::shared_ptr<L> track(std::string attr, std::shared_ptr<L> layer) {
    tracked_.emplace_back(std::move(attr), layer);
    layers_.push_back(layer);
    return layer;
  }
  /// Registers a list of sub-layers: their object paths are attr.0, attr.1, …
  template <typename L>
  std::vector<std::shared_ptr<L>> track_list(const std::string& attr,
                                            std::vector<std::shared_ptr<L>> layers) {
    for (size_t i = 0; i < layers.size(); ++i) track(attr + "." + std::to_string(i), layers[i]);
    return layers;
  }

  enum class Kind { kSubclassed, kSequential, kFunctional };
  Kind kind_ = Kind::kSubclassed;
  std::vector<std::shared_ptr<Layer>> layers_;
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> tracked_;
  std::optional<LayoutMap> layout_map_;
  std::shared_ptr<const Distribution> distribution_;
  std::optional<Shape> output_shape_;

  /// Traces the model on a symbolic input of `input_shape` (creating lazy weights under the
  /// recorded map), then materialises every lazy variable.
  void build_and_materialize(const Shape& input_shape);
  void materialize_variables();

 private:
  void build(const Shape&) override {}
  Array call(const Array& x) override;
};

struct SequentialOptions {
  std::string name;                 // "sequential", "sequential_1", … when empty
  std::optional<Shape> input_shape;  // without the batch dimension; builds at construction
};

/// keras.Sequential(layers).
class Sequential : public Model {
 public:
  explicit Sequential(std::vector<std::shared_ptr<Layer>> layers, SequentialOptions options = {});
  Tensor call(const Tensor& x) override;
};

}  // namespace meshlayout
