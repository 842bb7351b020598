#include "meshlayout/nn/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <span>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/materialize.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout {
namespace {

/// The input layer of a functional model (keras InputLayer): passes its input through.
class InputLayer : public Layer {
 public:
  InputLayer() : Layer("input_layer", "") {}
  Shape compute_output_shape(const Shape& s) const override { return s; }

 protected:
  void build(const Shape&) override {}
  Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
};

}  // namespace

Model::Model(std::string name, std::string_view class_name) : Layer(class_name, std::move(name)) {
  if (const LayoutMap* map = current_layout_map()) {
    layout_map_ = *map;
  } else {
    distribution_ = meshlayout::distribution();
  }
}

std::vector<std::pair<std::string, std::shared_ptr<Layer>>> Model::sublayers() const {
  if (kind_ == Kind::kSubclassed) return tracked_;
  std::vector<std::pair<std::string, std::shared_ptr<Layer>>> out;
  for (const auto& l : layers_) out.emplace_back(l->name(), l);
  return out;
}

Shape Model::compute_output_shape(const Shape& input_shape) const {
  if (output_shape_) {
    Shape out = *output_shape_;
    if (!out.empty() && !input_shape.empty()) out[0] = input_shape[0];
    return out;
  }
  throw FailedPreconditionError(fmt::format("model {} is not built yet", quote(name())));
}

void Model::materialize_variables() {
  materialize_lazy(keyed_variables(*this, "", kind_ != Kind::kSubclassed), layout_map_,
                   distribution_);
}

void Model::build_and_materialize(const Shape& input_shape) {
  if (!layout_map_ && !distribution_) {  // built in a scope it was not constructed in
    if (const LayoutMap* map = current_layout_map()) {
      layout_map_ = *map;
    } else {
      distribution_ = meshlayout::distribution();
    }
  }
  const bool has_source = layout_map_.has_value() || distribution_ != nullptr;
  const bool deferred = has_source && ModelBuildGuard::active();
  {
    std::optional<ModelBuildGuard> guard;
    if (has_source) guard.emplace();
    std::optional<LayoutMapScope> scope;
    std::optional<DistributionScope> dscope;
    if (layout_map_) scope.emplace(*layout_map_);
    if (distribution_) dscope.emplace(distribution_);
    Tensor out = call(Tensor::symbolic(input_shape));
    output_shape_ = out.shape();
    input_shape_ = input_shape;
  }
  if (has_source && !deferred) materialize_variables();
}

void Model::build_in_scope(const Shape& input_shape) {
  NameScope scope = open_name_scope();
  if (!built()) {
    build_and_materialize(input_shape);
    set_built();
  }
}

Tensor Model::operator()(const Tensor& x) {
  build_in_scope(x.shape());
  NameScope scope = open_name_scope();
  if (x.is_symbolic()) {
    // Keeps its producer, so a functional model can be built through this model.
    return Tensor::symbolic(compute_output_shape(x.shape()), weak_from_this().lock(),
                            std::make_shared<const Tensor>(x));
  }
  Tensor y = call(x);
  if (auto d = meshlayout::distribution()) {
    if (std::optional<TensorLayout> layout = d->get_tensor_layout(path() + "/output")) {
      return Tensor(distribute_tensor(y.value(), *layout));
    }
  }
  return y;
}

Array Model::call(const Array& x) {
  // Reached only when a model is used as a plain layer; copies in and out.
  Tensor out = call(Tensor(distribute_tensor(x, x.layout())));
  return distribute_tensor(out.value(), out.value().layout());
}

Tensor Model::call(const Tensor& x) {
  Tensor t = x;
  for (const auto& layer : layers_) t = (*layer)(t);
  return t;
}

Array Model::recompute(const Array& x) {
  if (kind_ != Kind::kSequential) return Layer::recompute(x);
  NameScope scope = open_name_scope();
  std::optional<Array> t;
  for (const auto& layer : layers_) t.emplace(layer->recompute(t ? *t : x));
  if (!t) return distribute_tensor(x, x.layout());
  return std::move(*t);
}

std::optional<double> Model::fused_loss_and_gradients(const Array&, const Array&,
                                                      const CompiledLoss&, Gradients&) {
  return std::nullopt;
}

Array Model::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (kind_ != Kind::kSequential) return Layer::backward(x, dy, grads);
  if (!built()) {
    throw FailedPreconditionError(
        fmt::format("model {} is not built: call it before its backward", quote(name())));
  }
  if (layers_.empty()) return distribute_tensor(dy, x.layout());
  NameScope scope = open_name_scope();
  // inputs[k]: the input of layer k + 1 (layer 0 reads x).
  std::deque<Array> inputs;
  for (size_t k = 0; k + 1 < layers_.size(); ++k)
    inputs.push_back(layers_[k]->recompute(k == 0 ? x : inputs.back()));
  std::optional<Array> g;
  for (size_t k = layers_.size(); k-- > 0;) {
    const Array& in = k == 0 ? x : inputs[k - 1];
    g.emplace(layers_[k]->backward(in, g ? *g : dy, grads));
    if (k > 0) inputs.pop_back();  // no longer needed
  }
  return std::move(*g);
}

namespace {

/// keras Functional: the layer graph between the inputs and the output, replayed in order.
class FunctionalModel : public Model {
 public:
  FunctionalModel(std::string name, const std::vector<Tensor>& inputs, const Tensor& outputs)
      : Model(std::move(name), "functional") {
    kind_ = Kind::kFunctional;
    std::map<const void*, size_t> index;
    for (const Tensor& in : inputs) {
      if (!in.is_symbolic()) {
        throw ValueError(
            "the inputs of a functional model must be symbolic tensors (Input(…) or "
            "a layer's output on one), got a concrete tensor of shape " +
            shape_to_string(in.shape()));
      }
      index.emplace(in.node(), nodes_.size());
      input_nodes_.push_back(nodes_.size());
      nodes_.push_back({std::make_shared<InputLayer>(), {}, true});
    }
    Walk walk;
    walk.reached.assign(nodes_.size(), false);
    output_node_ = visit(outputs, index, inputs, walk);
    for (size_t i : input_nodes_) {
      if (!walk.reached[i]) reach(i, walk);  // an input the output does not use
    }
    order_layers(walk);
    output_shape_ = outputs.shape();
    last_use_.assign(nodes_.size(), 0);
    for (size_t k = 0; k < nodes_.size(); ++k) {
      for (size_t i : nodes_[k].inputs) last_use_[i] = k;
    }
  }

  using Model::materialize_variables;

  Tensor call(const Tensor& x) override { return run({x}); }

  Array recompute(const Array& x) override {
    const Array* in[] = {&x};
    return recompute_inputs(in);
  }

  Array recompute_inputs(std::span<const Array* const> xs) override {
    check_input_count(xs.size());
    NameScope scope = open_name_scope();
    std::deque<Array> owned;
    std::vector<const Array*> values = replay(xs, owned);
    return distribute_tensor(*values[output_node_], values[output_node_]->layout());
  }

  Array backward(const Array& x, const Array& dy, Gradients& grads) override {
    const Array* in[] = {&x};
    return std::move(backward_inputs(in, dy, grads)[0]);
  }

  std::vector<Array> backward_inputs(std::span<const Array* const> xs, const Array& dy,
                                     Gradients& grads) override {
    check_input_count(xs.size());
    NameScope scope = open_name_scope();
    std::deque<Array> owned;
    const std::vector<const Array*> values = replay(xs, owned);
    // d[k]: dL/d value of node k, summed over the nodes reading it; the output's is dy.
    std::vector<std::optional<Array>> d(nodes_.size());
    auto accumulate = [&](size_t node, Array g) {
      if (!d[node]) {
        d[node].emplace(std::move(g));
      } else {
        d[node] = add(std::move(*d[node]), g);
      }
    };
    for (size_t k = nodes_.size(); k-- > 0;) {
      const Node& node = nodes_[k];
      if (k == output_node_ && node.is_input) accumulate(k, distribute_tensor(dy, dy.layout()));
      if (node.is_input) continue;
      const Array* g = k == output_node_ ? &dy : d[k] ? &*d[k] : nullptr;
      if (!g) continue;  // the output does not depend on this node
      std::vector<const Array*> ins;
      for (size_t i : node.inputs) ins.push_back(values[i]);
      std::vector<Array> gi = node.layer->backward_inputs(ins, *g, grads);
      d[k].reset();
      for (size_t j = 0; j < node.inputs.size(); ++j) accumulate(node.inputs[j], std::move(gi[j]));
    }
    std::vector<Array> out;
    for (size_t i = 0; i < xs.size(); ++i) {
      std::optional<Array>& di = d[input_nodes_[i]];
      out.push_back(di ? std::move(*di)
                       : filled(xs[i]->layout(), xs[i]->shape(), 0.0f, xs[i]->runtime_ptr()));
    }
    return out;
  }

  Tensor apply(const std::vector<Tensor>& xs) override {
    if (xs.size() == 1) return (*this)(xs[0]);
    check_input_count(xs.size());
    NameScope scope = open_name_scope();
    if (std::any_of(xs.begin(), xs.end(), [](const Tensor& t) { return t.is_symbolic(); })) {
      std::vector<std::shared_ptr<const Tensor>> ins;
      for (const Tensor& t : xs) ins.push_back(std::make_shared<const Tensor>(t));
      return Tensor::symbolic(compute_output_shape(xs[0].shape()), weak_from_this().lock(),
                              std::move(ins));
    }
    return run(xs);
  }

 private:
  struct Node {
    std::shared_ptr<Layer> layer;  // an InputLayer for a graph input
    std::vector<size_t> inputs;
    bool is_input = false;
  };

  struct Walk {  // the walk from the output (keras.src.ops.function._build_map)
    std::vector<bool> reached;
    std::vector<size_t> post_order;                // nodes, each after its inputs
    std::map<const Layer*, size_t> first_reached;  // layers in the order first met
  };

  void reach(size_t node, Walk& walk) {
    walk.reached[node] = true;
    walk.first_reached.emplace(nodes_[node].layer.get(), walk.first_reached.size());
    walk.post_order.push_back(node);
  }

  size_t visit(const Tensor& t, std::map<const void*, size_t>& index,
               const std::vector<Tensor>& inputs, Walk& walk) {
    if (!t.is_symbolic()) {
      throw ValueError(
          "the outputs of a functional model must be computed from its symbolic "
          "inputs, got a concrete tensor of shape " +
          shape_to_string(t.shape()));
    }
    if (auto it = index.find(t.node()); it != index.end()) {
      if (!walk.reached[it->second]) reach(it->second, walk);  // a model input
      return it->second;
    }
    if (!t.producer()) {
      std::string shapes;
      for (const Tensor& in : inputs)
        shapes += (shapes.empty() ? "" : ", ") + shape_to_string(in.shape());
      throw ValueError(
          fmt::format("the outputs are not computed from the inputs of shape {}: "
                      "they depend on another input, of shape {}",
                      shapes, shape_to_string(t.shape())));
    }
    walk.first_reached.emplace(t.producer().get(), walk.first_reached.size());
    Node node{t.producer(), {}, false};
    for (const auto& in : t.inputs()) node.inputs.push_back(visit(*in, index, inputs, walk));
    index.emplace(t.node(), nodes_.size());
    nodes_.push_back(std::move(node));
    walk.reached.push_back(true);
    walk.post_order.push_back(nodes_.size() - 1);
    return nodes_.size() - 1;
  }

  /// layers_ as Keras' Functional.layers: by depth from the output (a shared layer at its
  /// deepest use), the deepest first; ties in the order the walk first met them.
  void order_layers(const Walk& walk) {
    std::vector<size_t> node_depth(nodes_.size(), 0);
    std::map<const Layer*, size_t> layer_depth;
    for (auto it = walk.post_order.rbegin(); it != walk.post_order.rend(); ++it) {
      const Node& node = nodes_[*it];
      size_t& known = layer_depth[node.layer.get()];
      const size_t depth = std::max(node_depth[*it], known);
      known = depth;
      node_depth[*it] = depth;
      for (size_t parent : node.inputs)
        node_depth[parent] = std::max(node_depth[parent], depth + 1);
    }
    std::vector<std::shared_ptr<Layer>> layers;
    for (size_t k : walk.post_order) {
      if (std::find(layers.begin(), layers.end(), nodes_[k].layer) == layers.end()) {
        layers.push_back(nodes_[k].layer);
      }
    }
    std::stable_sort(layers.begin(), layers.end(), [&](const auto& a, const auto& b) {
      const size_t da = layer_depth.at(a.get()), db = layer_depth.at(b.get());
      if (da != db) return da > db;
      return walk.first_reached.at(a.get()) < walk.first_reached.at(b.get());
    });
    layers_ = std::move(layers);
  }

  void check_input_count(size_t n) const {
    if (n != input_nodes_.size()) {
      throw ValueError(fmt::format("model {} takes {} input{}, got {}", quote(name()),
                                   input_nodes_.size(), input_nodes_.size() == 1 ? "" : "s", n));
    }
  }

  Tensor run(const std::vector<Tensor>& xs) {
    check_input_count(xs.size());
    std::vector<std::optional<Tensor>> values(nodes_.size());
    for (size_t i = 0; i < xs.size(); ++i) values[input_nodes_[i]] = xs[i];
    for (size_t k = 0; k < nodes_.size(); ++k) {
      const Node& node = nodes_[k];
      if (node.is_input) continue;
      std::vector<Tensor> in;
      for (size_t i : node.inputs) in.push_back(*values[i]);
      values[k] = node.layer->apply(in);
      // Free what no later node reads (activations of a long graph).
      for (size_t i : node.inputs) {
        if (last_use_[i] == k && i != output_node_) values[i].reset();
      }
    }
    return *values[output_node_];
  }

  /// Every node's value for inputs xs (pointers into xs or `owned`), by the layers' recompute.
  std::vector<const Array*> replay(std::span<const Array* const> xs, std::deque<Array>& owned) {
    std::vector<const Array*> values(nodes_.size(), nullptr);
    for (size_t i = 0; i < xs.size(); ++i) values[input_nodes_[i]] = xs[i];
    for (size_t k = 0; k < nodes_.size(); ++k) {
      const Node& node = nodes_[k];
      if (node.is_input) continue;
      std::vector<const Array*> in;
      for (size_t i : node.inputs) in.push_back(values[i]);
      owned.push_back(node.layer->recompute_inputs(in));
      values[k] = &owned.back();
    }
    return values;
  }

  std::vector<Node> nodes_;  // in an order where every node follows its inputs
  std::vector<size_t> input_nodes_;
  size_t output_node_ = 0;
  std::vector<size_t> last_use_;  // the last node reading each node's value
};

}  // namespace

std::shared_ptr<Model> Model::functional(const Tensor& inputs, const Tensor& outputs,
                                         std::string name) {
  return functional(std::vector<Tensor>{inputs}, outputs, std::move(name));
}

std::shared_ptr<Model> Model::functional(const std::vector<Tensor>& inputs, const Tensor& outputs,
                                         std::string name) {
  auto model = std::make_shared<FunctionalModel>(std::move(name), inputs, outputs);
  model->materialize_variables();
  return model;
}

Sequential::Sequential(std::vector<std::shared_ptr<Layer>> layers, SequentialOptions options)
    : Model(std::move(options.name), "sequential") {
  kind_ = Kind::kSequential;
  layers_ = std::move(layers);
  if (options.input_shape) {
    Shape full{1};  // the batch size does not matter for the weights
    full.insert(full.end(), options.input_shape->begin(), options.input_shape->end());
    build_in_scope(full);
  }
}

Tensor Sequential::call(const Tensor& x) { return Model::call(x); }

void Sequential::add(std::shared_ptr<Layer> layer) {
  if (!layer) throw ValueError(fmt::format("Sequential {}: add() got a null layer", quote(name())));
  for (const auto& existing : layers_) {
    if (existing->name() == layer->name()) {
      throw ValueError(fmt::format(
          "All layers added to a Sequential model should have unique names. Name {} is already "
          "the name of a layer in this model. Update the `name` argument to pass a unique name.",
          quote(layer->name())));
    }
  }
  layers_.push_back(layer);
  if (!built()) return;
  try {
    NameScope scope = open_name_scope();
    std::optional<ModelBuildGuard> guard;
    std::optional<LayoutMapScope> map_scope;
    std::optional<DistributionScope> distribution_scope;
    if (layout_map_ || distribution_) guard.emplace();
    if (layout_map_) map_scope.emplace(*layout_map_);
    if (distribution_) distribution_scope.emplace(distribution_);
    output_shape_ = (*layer)(Tensor::symbolic(*output_shape_)).shape();
  } catch (...) {
    layers_.pop_back();
    throw;
  }
  if (layout_map_ || distribution_) materialize_variables();
}

std::shared_ptr<Layer> Sequential::pop() {
  if (layers_.empty()) throw ValueError("There are no layers in the model.");
  std::shared_ptr<Layer> layer = layers_.back();
  layers_.pop_back();
  if (built() && input_shape_) {
    Shape shape = *input_shape_;
    for (const auto& l : layers_) shape = l->compute_output_shape(shape);
    output_shape_ = shape;
  }
  return layer;
}

}  // namespace meshlayout
