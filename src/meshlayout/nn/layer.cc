#include "meshlayout/nn/layer.h"

#include <fmt/format.h>

#include <cxxabi.h>
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <typeinfo>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/materialize.h"

namespace meshlayout {

Tensor::Tensor(Array value)
    : shape_(value.shape()), value_(std::make_shared<const Array>(std::move(value))) {}

Tensor Tensor::symbolic(Shape shape, std::shared_ptr<Layer> layer,
                        std::shared_ptr<const Tensor> input) {
  std::vector<std::shared_ptr<const Tensor>> inputs;
  if (input) inputs.push_back(std::move(input));
  return symbolic(std::move(shape), std::move(layer), std::move(inputs));
}

Tensor Tensor::symbolic(Shape shape, std::shared_ptr<Layer> layer,
                        std::vector<std::shared_ptr<const Tensor>> inputs) {
  Tensor t;
  t.shape_ = std::move(shape);
  t.producer_ = std::move(layer);
  t.inputs_ = std::move(inputs);
  t.node_ = std::make_shared<const char>();
  return t;
}

const Array& Tensor::value() const {
  if (!value_) {
    throw FailedPreconditionError(
        fmt::format("a symbolic tensor of shape {} has no value; call the model on an Array",
                    shape_to_string(shape_)));
  }
  return *value_;
}

Tensor Input(const Shape& shape, int64_t batch_size) {
  Shape full{batch_size};
  full.insert(full.end(), shape.begin(), shape.end());
  return Tensor::symbolic(std::move(full));
}

namespace {

std::mutex g_names_mu;
std::map<std::string, int, std::less<>> g_name_counts;

// keras.src.utils.naming.uniquify: one counter per name in the process (reset by clear_session).
std::string uniquify(std::string_view class_name) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  int& n = g_name_counts[std::string(class_name)];
  std::string name = n == 0 ? std::string(class_name) : fmt::format("{}_{}", class_name, n);
  ++n;
  return name;
}

// "meshlayout::(anonymous namespace)::MyModel" → "MyModel"; template arguments dropped.
std::string unqualified_class_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : type.name();
  std::free(demangled);  // NOLINT: allocated by __cxa_demangle with malloc
  if (const size_t lt = full.find('<'); lt != std::string::npos) full.resize(lt);
  if (const size_t colon = full.rfind("::"); colon != std::string::npos)
    full = full.substr(colon + 2);
  return full;
}

thread_local int t_model_builds = 0;
// Layer builds in progress on this thread (a parent's build() building its sub-layers).
thread_local int t_layer_builds = 0;

struct BuildDepth {
  BuildDepth() { ++t_layer_builds; }
  ~BuildDepth() { --t_layer_builds; }
  BuildDepth(const BuildDepth&) = delete;
  BuildDepth& operator=(const BuildDepth&) = delete;
};

}  // namespace

std::string to_snake_case(std::string_view class_name) {
  std::string s(class_name);
  RE2::GlobalReplace(&s, R"(\W+)", "");
  RE2::GlobalReplace(&s, "(.)([A-Z][a-z]+)", R"(\1_\2)");
  RE2::GlobalReplace(&s, "([a-z])([A-Z])", R"(\1_\2)");
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string auto_name(std::string_view prefix) { return uniquify(to_snake_case(prefix)); }

ModelBuildGuard::ModelBuildGuard() { ++t_model_builds; }
ModelBuildGuard::~ModelBuildGuard() { --t_model_builds; }
bool ModelBuildGuard::active() { return t_model_builds > 0; }

void clear_session() {
  std::lock_guard<std::mutex> lock(g_names_mu);
  g_name_counts.clear();
}

Layer::Layer(std::string_view class_name, std::string name)
    : name_(std::move(name)), dtype_(floatx()) {
  if (!name_.empty()) {
    check_path_component(name_);
  } else if (!class_name.empty()) {
    name_ = uniquify(class_name);
  }
}

const std::string& Layer::name() const {
  if (name_.empty()) name_ = uniquify(to_snake_case(unqualified_class_name(typeid(*this))));
  return name_;
}

std::string Layer::path() const {
  if (!parent_path_ || parent_path_->empty()) return name();
  return *parent_path_ + "/" + name();
}

NameScope Layer::open_name_scope() {
  if (!parent_path_) parent_path_ = current_path();
  return NameScope(name(), this, parent_path_);
}

void Layer::maybe_build(const Shape& input_shape) {
  NameScope scope = open_name_scope();
  if (!built_) {
    BuildDepth depth;
    build(input_shape);
    built_ = true;
  }
}

void Layer::build_standalone(const Shape& input_shape) {
  NameScope scope = open_name_scope();
  if (built_) return;
  {
    BuildDepth depth;
    build(input_shape);
    built_ = true;
  }
  materialize_if_standalone();
}

void Layer::materialize_if_standalone() {
  // Keras 3 creates a variable with the distribution's layout when the layer builds it: a layer
  // built outside any model (no model being built, no enclosing layer build, no Keras 2
  // LayoutMap scope) under a distribution takes its layouts now, its paths being final. A
  // model being built, or a parent layer, decides for its layers instead.
  if (t_layer_builds > 0 || ModelBuildGuard::active() || current_layout_map() != nullptr) return;
  if (auto d = distribution()) materialize_lazy(keyed_variables(*this, name()), std::nullopt, d);
}

Tensor Layer::operator()(const Tensor& x) {
  NameScope scope = open_name_scope();
  if (!built_) {
    {
      BuildDepth depth;
      build(x.shape());
      built_ = true;
    }
    // On a value or a symbolic tensor alike (Keras builds on a KerasTensor the same way).
    materialize_if_standalone();
  }
  if (x.is_symbolic()) {
    return Tensor::symbolic(compute_output_shape(x.shape()), shared_from_this(),
                            std::make_shared<const Tensor>(x));
  }
  Array y = call(x.value());
  // Keras 3: a "<layer path>/output" key of the current distribution relayouts the output.
  if (auto d = distribution()) {
    if (std::optional<TensorLayout> layout = d->get_tensor_layout(path() + "/output")) {
      return Tensor(distribute_tensor(y, *layout));
    }
  }
  return Tensor(std::move(y));
}

Array Layer::call_on(const Array& x) {
  NameScope scope = open_name_scope();
  if (!built_) {
    {
      BuildDepth depth;
      build(x.shape());
      built_ = true;
    }
    materialize_if_standalone();
  }
  return call(x);
}

void Layer::set_training(bool training) {
  for (const auto& [attr, layer] : sublayers()) layer->set_training(training);
}

Array Layer::backward(const Array&, const Array&, Gradients&) {
  throw FailedPreconditionError(
      fmt::format("layer {} ({}) has no backward pass: it cannot be trained yet", quote(name()),
                  unqualified_class_name(typeid(*this))));
}

std::vector<Array> Layer::backward_inputs(std::span<const Array* const> inputs, const Array& dy,
                                          Gradients& grads) {
  if (inputs.size() != 1) {
    throw FailedPreconditionError(
        fmt::format("layer {} ({}) takes one input: it has no backward for "
                    "a call on {} inputs",
                    quote(name()), unqualified_class_name(typeid(*this)), inputs.size()));
  }
  std::vector<Array> out;
  out.push_back(backward(*inputs[0], dy, grads));
  return out;
}

Array Layer::recompute(const Array& x) {
  NameScope scope = open_name_scope();
  if (!built_) {
    throw FailedPreconditionError(
        fmt::format("layer {} is not built: call it before its backward", quote(name())));
  }
  Array y = call(x);
  if (auto d = distribution()) {
    if (std::optional<TensorLayout> layout = d->get_tensor_layout(path() + "/output")) {
      return distribute_tensor(y, *layout);
    }
  }
  return y;
}

Array Layer::recompute_inputs(std::span<const Array* const> inputs) {
  if (inputs.size() != 1) {
    throw FailedPreconditionError(fmt::format("layer {} ({}) takes one input, got {}",
                                              quote(name()), unqualified_class_name(typeid(*this)),
                                              inputs.size()));
  }
  return recompute(*inputs[0]);
}

Tensor Layer::apply(const std::vector<Tensor>& inputs) {
  if (inputs.size() != 1) {
    throw ValueError(
        fmt::format("layer {} takes one input, got a list of {}", quote(name()), inputs.size()));
  }
  return (*this)(inputs[0]);
}

VariablePtr Layer::add_weight(VariableSpec spec, std::string attribute) {
  std::string attr = attribute.empty() ? spec.name : std::move(attribute);
  check_path_component(attr);
  if (!spec.dtype) spec.dtype = dtype_;
  VariablePtr v;
  {
    // Keras add_weight: inside the layer's scope (a no-op in build(), where it is open).
    NameScope scope(name(), this, parent_path_);
    v = std::make_shared<Variable>(std::move(spec));
  }
  // Until a model gives it a longer one, the object path is the layer's own.
  v->set_object_path(name() + "." + attr);
  if (current_layout_map() == nullptr && distribution() == nullptr) {
    if (v->explicit_layout() && v->explicit_layout()->device_mesh()) {
      v->materialize(*v->explicit_layout());
    } else {
      DeviceMesh one({1}, {"replica"}, std::vector<std::string>{"cpu:0"});
      v->materialize(TensorLayout::replicated(static_cast<int>(v->shape().size()), one));
    }
  }
  weights_.emplace_back(std::move(attr), v);
  return v;
}

std::vector<VariablePtr> Layer::variables() const {
  std::vector<VariablePtr> out;
  auto add = [&](const VariablePtr& v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  for (const auto& [attr, v] : weights_) {
    if (v->trainable()) add(v);
  }
  for (const auto& [attr, v] : weights_) {
    if (!v->trainable()) add(v);
  }
  for (const auto& [attr, child] : sublayers()) {
    for (const VariablePtr& v : child->variables()) add(v);
  }
  return out;
}

std::vector<VariablePtr> Layer::weights() const {
  std::vector<VariablePtr> out = variables();
  std::erase_if(out, [](const VariablePtr& v) { return v->is_rng_state(); });
  return out;
}

std::vector<double> Layer::losses() const {
  // Keras' Layer._get_regularization_losses: the trainable weights (own, then each sub-layer's),
  // each once, that have a regulariser. A frozen weight adds no penalty (fit skips it too).
  std::vector<double> out;
  for (const VariablePtr& v : variables()) {
    if (v->trainable() && v->regularizer()) out.push_back(v->regularization_loss());
  }
  return out;
}

}  // namespace meshlayout
