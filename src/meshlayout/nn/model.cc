#include "meshlayout/nn/model.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"

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

struct PathedVariable {
  std::string object_path;  // Keras 2
  std::string path;         // Keras 3
  VariablePtr variable;
};

// Object paths of every variable under `layer`, reached through attribute path `attr` (empty
// for the layer itself), and scope paths under `scope`.
void collect(Layer& layer, const std::string& attr, const std::string& scope,
             std::vector<PathedVariable>& out) {
  layer.set_path(scope);
  for (const auto& [name, v] : layer.own_weights()) {
    out.push_back({attr.empty() ? name : attr + "." + name, scope + "/" + name, v});
  }
  for (const auto& [child_attr, child] : layer.sublayers()) {
    collect(*child, attr.empty() ? child_attr : attr + "." + child_attr,
            scope + "/" + child->name(), out);
  }
}

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

std::vector<VariablePtr> Model::variables() const {
  std::vector<PathedVariable> all;
  for (const auto& [attr, layer] : sublayers()) collect(*layer, attr, layer->path(), all);
  std::vector<VariablePtr> out;
  for (auto& p : all) {
    if (std::find(out.begin(), out.end(), p.variable) == out.end()) out.push_back(p.variable);
  }
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
  std::vector<PathedVariable> all;
  // Keras 2 keys: a functional/sequential model's layers are keyed by layer name; a subclassed
  // model's by attribute path. Keras 3 paths: functional "d1/kernel", others "<model>/...".
  for (const auto& [attr, layer] : sublayers()) {
    const std::string scope = kind_ == Kind::kFunctional ? layer->name() : name() + "/" + layer->name();
    collect(*layer, attr, scope, all);
  }
  std::vector<std::pair<PathedVariable*, TensorLayout>> plan;
  // 1. Decide and check every layout before allocating anything.
  for (PathedVariable& p : all) {
    if (!p.variable->is_lazy()) continue;
    if (std::any_of(plan.begin(), plan.end(), [&](auto& e) { return e.first->variable == p.variable; })) {
      continue;  // the same variable reached through two paths: the first wins
    }
    p.variable->set_paths(p.object_path, p.path);
    const std::string what = p.variable->describe();
    if (const std::optional<TensorLayout>& given = p.variable->explicit_layout()) {
      // An explicit layout wins over rules (Keras >= 3.10); a mesh-less one takes the
      // map's or the distribution's mesh.
      TensorLayout layout = *given;
      if (!layout.device_mesh()) {
        if (layout_map_ && layout_map_->device_mesh()) {
          layout.set_device_mesh(*layout_map_->device_mesh());
        } else if (distribution_) {
          layout.set_device_mesh(distribution_->device_mesh());
        } else {
          throw ValueError(fmt::format("{} has the explicit layout {} without a mesh, and the "
                                       "model has no LayoutMap mesh or distribution to give it one",
                                       what, layout.to_string()));
        }
      }
      ShardGeometry check(layout, p.variable->shape(), {}, what);
      plan.emplace_back(&p, std::move(layout));
      continue;
    }
    if (!layout_map_ && distribution_) {  // Keras 3: keyed by the scope path
      TensorLayout layout = TensorLayout::replicated(0);
      const std::string what3 = fmt::format("variable {} with shape {}", quote(p.path),
                                            shape_to_string(p.variable->shape()));
      try {
        layout = distribution_->get_variable_layout(*p.variable);
      } catch (const ValueError& e) {
        throw ValueError(fmt::format("{}: {}", what3, e.what()));
      }
      ShardGeometry check(layout, p.variable->shape(), {}, fmt::format("variable {}", quote(p.path)));
      plan.emplace_back(&p, std::move(layout));
      continue;
    }
    if (!layout_map_ || !layout_map_->device_mesh()) {
      std::optional<size_t> rule;
      if (layout_map_) rule = layout_map_->match_index(p.object_path);
      if (!rule || !layout_map_->rule(*rule).layout.device_mesh()) {
        throw ValueError(fmt::format(
            "{} with shape {}: the LayoutMap has no device mesh, so there is no mesh to lay the variable out "
            "on; give the LayoutMap a mesh (LayoutMap(mesh))",
            what, shape_to_string(p.variable->shape())));
      }
    }
    std::optional<TensorLayout> layout;
    std::string rule_text = "no rule (replicated)";
    try {
      std::optional<size_t> rule = layout_map_->match_index(p.object_path);
      if (rule) {
        layout = layout_map_->rule(*rule).layout;
        rule_text = fmt::format("rule {} ({})", *rule, quote(layout_map_->rule(*rule).pattern));
      }
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("{} with shape {}: {}", what,
                                   shape_to_string(p.variable->shape()), e.what()));
    }
    if (!layout) {
      layout = TensorLayout::replicated(static_cast<int>(p.variable->shape().size()),
                                        *layout_map_->device_mesh());
    } else if (!layout->device_mesh()) {
      layout->set_device_mesh(*layout_map_->device_mesh());
    }
    try {
      ShardGeometry check(*layout, p.variable->shape(), {}, what);
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("{} [from {}]", e.what(), rule_text));
    }
    plan.emplace_back(&p, std::move(*layout));
  }
  // 2. Materialise: every device allocates and fills only its box.
  for (auto& [p, layout] : plan) p->variable->materialize(layout);
}

void Model::build_and_materialize(const Shape& input_shape) {
  {
    std::optional<LayoutMapScope> scope;
    std::optional<DistributionScope> dscope;
    if (layout_map_) scope.emplace(*layout_map_);
    if (distribution_) dscope.emplace(distribution_);
    Tensor out = call(Tensor::symbolic(input_shape));
    output_shape_ = out.shape();
  }
  materialize_variables();
}

Tensor Model::operator()(const Tensor& x) {
  if (!built()) {
    build_and_materialize(x.shape());
    set_built();
  }
  if (x.is_symbolic()) return Tensor::symbolic(compute_output_shape(x.shape()));
  return call(x);
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
    (*this)(Tensor::symbolic(full));
  }
}

Tensor Sequential::call(const Tensor& x) { return Model::call(x); }

}  // namespace meshlayout
