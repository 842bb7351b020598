#include "meshlayout/nn/layer.h"

#include <fmt/format.h>

#include <cxxabi.h>
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <typeinfo>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/gradient_ops.h"
#include "meshlayout/nn/materialize.h"
#include "meshlayout/ops/matmul.h"

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

Activation parse_activation(std::string_view name) {
  if (name == "linear" || name.empty()) return Activation::kLinear;
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu") return Activation::kGelu;
  if (name == "tanh") return Activation::kTanh;
  if (name == "softmax") return Activation::kSoftmax;
  if (name == "silu" || name == "swish") return Activation::kSilu;
  throw ValueError(
      fmt::format("unknown activation {}; expected one of 'linear', 'relu', "
                  "'gelu', 'tanh', 'softmax', 'silu'",
                  quote(name)));
}

namespace {

// Applies `activation` to y's local shards in place (softmax: y's last dimension is whole), in
// E: float (F32, as before F64 existed) or double (F64).
template <typename E>
void activate_in_place(Activation activation, Array& y) {
  const int64_t row = y.shape().empty() ? 1 : y.shape().back();
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    E* p = reinterpret_cast<E*>(s.buffer.data());
    const int64_t n = s.box.num_elements();
    switch (activation) {
      case Activation::kRelu:
        for (int64_t k = 0; k < n; ++k) p[k] = p[k] > 0 ? p[k] : E(0);
        break;
      case Activation::kTanh:
        for (int64_t k = 0; k < n; ++k) p[k] = std::tanh(p[k]);
        break;
      case Activation::kGelu:  // exact GELU, as keras.activations.gelu(approximate=False)
        for (int64_t k = 0; k < n; ++k) {
          p[k] = static_cast<E>(0.5 * p[k] * (1.0 + std::erf(p[k] / std::sqrt(2.0))));
        }
        break;
      case Activation::kSoftmax:
        for (int64_t r = 0; row > 0 && r < n / row; ++r) {
          E* v = p + r * row;
          E m = v[0];
          for (int64_t k = 1; k < row; ++k) m = std::max(m, v[k]);
          double sum = 0;
          for (int64_t k = 0; k < row; ++k) sum += (v[k] = std::exp(v[k] - m));
          for (int64_t k = 0; k < row; ++k) v[k] = static_cast<E>(v[k] / sum);
        }
        break;
      case Activation::kSilu:  // x · sigmoid(x) in E (float, as keras-hub runs it in fp32)
        for (int64_t k = 0; k < n; ++k) p[k] = p[k] / (E(1) + std::exp(-p[k]));
        break;
      case Activation::kLinear:
        break;
    }
  });
}

void activate_in_place(Activation activation, Array& y) {
  if (activation == Activation::kLinear) return;
  if (y.dtype() == DType::kF32) {
    activate_in_place<float>(activation, y);
  } else {
    activate_in_place<double>(activation, y);
  }
}

void check_activation_dtype(Activation activation, const Array& x) {
  if (activation != Activation::kLinear && x.dtype() != DType::kF32 && x.dtype() != DType::kF64) {
    throw ValueError(
        fmt::format("activations run on F32 or F64 tensors, got {}", dtype_name(x.dtype())));
  }
}

// Softmax needs whole rows: the layout with the last dimension gathered if it is split.
TensorLayout activation_layout(Activation activation, const Array& x) {
  TensorLayout layout = x.layout();
  if (activation == Activation::kSoftmax && layout.rank() > 0 &&
      layout.axes().back().is_sharded()) {
    std::vector<DimSharding> axes = layout.axes();
    axes.back() = DimSharding();
    layout = TensorLayout(axes, x.mesh());
  }
  return layout;
}

}  // namespace

Array apply_activation(Activation activation, const Array& x) {
  check_activation_dtype(activation, x);
  Array y = distribute_tensor(x, activation_layout(activation, x));
  activate_in_place(activation, y);
  return y;
}

Array apply_activation(Activation activation, Array&& x) {
  check_activation_dtype(activation, x);
  const TensorLayout layout = activation_layout(activation, x);
  if (layout != x.layout()) return apply_activation(activation, static_cast<const Array&>(x));
  Array y = std::move(x);
  activate_in_place(activation, y);
  return y;
}

Dense::Dense(int64_t units, DenseOptions options)
    : Layer("dense", options.name), units_(units), options_(std::move(options)) {
  if (units < 1) throw ValueError(fmt::format("Dense units must be at least 1, got {}", units));
}

Shape Dense::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.back() = units_;
  return out;
}

void Dense::build(const Shape& input_shape) {
  if (input_shape.empty()) {
    throw ValueError(fmt::format("Dense layer {} needs inputs of rank >= 1, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  kernel_ = add_weight({.name = "kernel",
                        .shape = {input_shape.back(), units_},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer,
                        .layout = options_.kernel_layout});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {units_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer,
                        .layout = options_.bias_layout});
  }
}

const Array& Dense::on_kernel_mesh(const Array& x, std::optional<Array>& storage) const {
  const DeviceMesh& mesh = kernel_->value().mesh();
  if (x.mesh() == mesh) return x;
  // An input on another mesh of the same devices follows the kernel's mesh.
  return storage.emplace(
      distribute_tensor(x, TensorLayout::replicated(static_cast<int>(x.shape().size()), mesh)));
}

void Dense::enable_lora(int64_t rank, std::optional<double> lora_alpha,
                        const Initializer& a_initializer, const Initializer& b_initializer) {
  lora_ = add_lora_weights(kernel_, lora_, rank, lora_alpha, a_initializer, b_initializer,
                           options_.kernel_regularizer);
}

const Array& Dense::effective_kernel(std::optional<Array>& storage) const {
  if (!lora_.enabled()) return kernel_->value();
  return storage.emplace(lora_effective_kernel(kernel_->value(), lora_));
}

Array Dense::call(const Array& x) {
  std::optional<Array> effective;
  Array y = pre_activation(x, effective_kernel(effective));
  if (options_.activation == Activation::kLinear) return y;
  return apply_activation(options_.activation, std::move(y));
}

// Dense::backward and apply_activation_backward: dense_backward.cc.

Array Dense::pre_activation(const Array& x, const Array& kernel) const {
  check_input_dtype("Dense", name(), x.dtype(), kernel.dtype());
  std::optional<Array> moved;
  Array y = matmul(on_kernel_mesh(x, moved), kernel);
  if (bias_) {
    // Bias laid out like y's last dimension, so each device holds the columns it adds to.
    Array b = distribute_tensor(bias_->value(), TensorLayout({y.layout().axes().back()}, y.mesh()));
    y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
      Array::Shard& s = y.local_shards()[i];
      const Array::Shard* bs = b.shard_at(s.position);
      const int64_t cols = s.box.shape.back();
      if (cols == 0) return;
      const auto add_bias = [&]<typename E>(E* p) {
        const E* bias = reinterpret_cast<const E*>(bs->buffer.data());
        for (int64_t r = 0; r < s.box.num_elements() / cols; ++r) {
          for (int64_t c = 0; c < cols; ++c) p[r * cols + c] += bias[c];
        }
      };
      if (y.dtype() == DType::kF32) {
        add_bias(reinterpret_cast<float*>(s.buffer.data()));
      } else {
        add_bias(reinterpret_cast<double*>(s.buffer.data()));
      }
    });
  }
  return y;
}

}  // namespace meshlayout
