#include "meshlayout/nn/model.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/materialize.h"

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

Model::Model(std::string name, std::string_view class_name)
    : Layer(class_name, std::move(name)) {
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
  materialize_lazy(keyed_variables(*this, "", kind_ != Kind::kSubclassed), layout_map_, distribution_);
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

std::shared_ptr<Model> Model::functional(const Tensor& inputs, const Tensor& outputs,
                                         std::string name) {
  // Walk back from the outputs to the inputs: each symbolic tensor knows its producer.
  std::vector<std::shared_ptr<Layer>> chain;
  const Tensor* t = &outputs;
  while (t->producer()) {
    chain.push_back(t->producer());
    t = t->input().get();
  }
  if (t->shape() != inputs.shape()) {
    throw ValueError(fmt::format("the outputs of shape {} are not computed from the inputs of "
                                 "shape {}",
                                 shape_to_string(outputs.shape()), shape_to_string(inputs.shape())));
  }
  std::reverse(chain.begin(), chain.end());
  struct FunctionalModel : Model {
    explicit FunctionalModel(std::string n) : Model(std::move(n), "functional") {}
  };
  auto model = std::make_shared<FunctionalModel>(std::move(name));
  model->kind_ = Kind::kFunctional;
  model->layers_.push_back(std::make_shared<InputLayer>());
  for (auto& l : chain) model->layers_.push_back(l);
  model->output_shape_ = outputs.shape();
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

}  // namespace meshlayout
