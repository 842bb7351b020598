// bind_layers.cc — layers from Python (issue 29 item 1): KerasTensor (a symbolic or concrete
// Tensor), Variable (.path, .object_path, .value as numpy, .layout, assign), the Layer base
// (__call__ on KerasTensors, lists of them, numpy arrays or Arrays; weights; attribute access to
// weights and sub-layers by their Keras 2 attribute names) and every layer of the C++ library,
// each built from its required arguments and a dict of options already checked by
// meshlayout/layers.py (Keras' names and defaults). The GIL is released while a layer computes.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/activations/activation_layer.h"
#include "meshlayout/nn/layers/activations/prelu.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"
#include "meshlayout/nn/layers/convolutional/conv2d.h"
#include "meshlayout/nn/layers/convolutional/separable_conv2d.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/core/einsum_dense.h"
#include "meshlayout/nn/layers/core/embedding.h"
#include "meshlayout/nn/layers/core/gated_feed_forward.h"
#include "meshlayout/nn/layers/core/reversible_embedding.h"
#include "meshlayout/nn/layers/merging/merge.h"
#include "meshlayout/nn/layers/normalization/batch_normalization.h"
#include "meshlayout/nn/layers/normalization/layer_normalization.h"
#include "meshlayout/nn/layers/normalization/rms_normalization.h"
#include "meshlayout/nn/layers/regularization/dropout.h"
#include "meshlayout/nn/layers/reshaping/reshape.h"
#include "meshlayout/nn/layers/rnn/lstm.h"
#include "meshlayout/nn/model.h"
#include "nn_bindings.h"

namespace meshlayout::python {
namespace {

// --- options: the dict meshlayout/layers.py passes (None or absent: the C++ default) ---------

bool has(const py::dict& d, const char* key) { return d.contains(key) && !d[key].is_none(); }

template <typename T>
T get(const py::dict& d, const char* key, T fallback) {
  return has(d, key) ? d[key].cast<T>() : fallback;
}

Initializer initializer(const py::dict& d, const char* key, Initializer fallback) {
  return has(d, key) ? Initializer::from_string(d[key].cast<std::string>()) : fallback;
}

// A regulariser arrives as (l1, l2).
std::optional<Regularizer> regularizer(const py::dict& d, const char* key) {
  if (!has(d, key)) return std::nullopt;
  auto [l1, l2] = d[key].cast<std::pair<double, double>>();
  return Regularizer::L1L2(l1, l2);
}

std::optional<TensorLayout> layout(const py::dict& d, const char* key) {
  if (!has(d, key)) return std::nullopt;
  return d[key].cast<TensorLayout>();
}

Activation activation(const py::dict& d) {
  return has(d, "activation") ? parse_activation(d["activation"].cast<std::string>())
                              : Activation::kLinear;
}

std::array<int64_t, 2> pair(const py::dict& d, const char* key, std::array<int64_t, 2> fallback) {
  if (!has(d, key)) return fallback;
  auto v = d[key].cast<std::vector<int64_t>>();
  return {v.at(0), v.at(1)};
}

// --- calling a layer ----------------------------------------------------------------------

std::string type_name(const py::handle& x) {
  return py::str(py::type::of(x).attr("__name__")).cast<std::string>();
}

// Keras' `training` argument for the duration of one call.
struct TrainingMode {
  Layer* layer = nullptr;
  TrainingMode(Layer& l, const py::object& training) {
    if (training.is_none()) return;
    layer = &l;
    l.set_training(py::bool_(training));  // Python truthiness, as Keras' `if training:`
  }
  ~TrainingMode() {
    if (layer) layer->set_training(false);
  }
};

// A copy sharing nothing with `a` (Array is move-only; a Tensor owns its value).
Array copy_of(const Array& a) { return distribute_tensor(a, a.layout()); }

Tensor concrete_input(const Layer& layer, const py::object& x) {
  if (py::isinstance<Array>(x)) {
    const Array& a = x.cast<const Array&>();
    py::gil_scoped_release release;
    return Tensor(copy_of(a));
  }
  HostTensor host = host_from_numpy(x, "the layer's input");
  std::shared_ptr<const Distribution> d = feed_distribution(layer);
  py::gil_scoped_release release;
  return Tensor(d->distribute_input(host));
}

py::object call_layer(const std::shared_ptr<Layer>& layer, const py::object& x,
                      const py::object& training) {
  TrainingMode mode(*layer, training);
  if (py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x)) {
    std::vector<Tensor> inputs;
    bool concrete = false;
    for (const py::handle& item : x) {
      if (py::isinstance<Tensor>(item)) {
        inputs.push_back(item.cast<Tensor>());
      } else {
        concrete = true;
        inputs.push_back(concrete_input(*layer, py::reinterpret_borrow<py::object>(item)));
      }
    }
    std::optional<Tensor> out;
    {
      py::gil_scoped_release release;
      out.emplace(layer->apply(inputs));
    }
    return concrete && !out->is_symbolic() ? array_to_python(copy_of(out->value()))
                                           : py::cast(*out);
  }
  if (py::isinstance<Tensor>(x)) {
    const Tensor in = x.cast<Tensor>();
    std::optional<Tensor> out;
    {
      py::gil_scoped_release release;
      out.emplace((*layer)(in));
    }
    return py::cast(*out);
  }
  if (x.is_none() || py::isinstance<py::str>(x) || py::isinstance<py::dict>(x)) {
    throw py::type_error(fmt::format(
        "layer {} expects a KerasTensor, a numpy array, an Array or a list of them as input, "
        "got {}",
        quote(layer->name()), type_name(x)));
  }
  const Tensor in = concrete_input(*layer, x);
  std::optional<Tensor> out;
  {
    py::gil_scoped_release release;
    out.emplace((*layer)(in));
  }
  return array_to_python(copy_of(out->value()));
}

// layer.kernel, layer.query, mha._query_dense: own weights by attribute name, then sub-layers.
py::object layer_attribute(const std::shared_ptr<Layer>& layer, const std::string& attr) {
  for (const auto& [name, v] : layer->own_weights()) {
    if (name == attr) return py::cast(v);
  }
  for (const auto& [name, sub] : layer->sublayers()) {
    if (name == attr) return py::cast(sub);
  }
  throw py::attribute_error(
      fmt::format("'{}' object (layer {}) has no attribute '{}'",
                  py::str(py::type::of(py::cast(layer)).attr("__name__")).cast<std::string>(),
                  quote(layer->name()), attr));
}

py::list variables_list(const std::vector<VariablePtr>& vs, std::optional<bool> trainable) {
  py::list out;
  for (const VariablePtr& v : vs) {
    if (!trainable || v->trainable() == *trainable) out.append(py::cast(v));
  }
  return out;
}

// An input shape (None for the batch dimension); TypeError for anything but integers.
Shape shape_arg(const py::object& shape) {
  if (py::isinstance<py::str>(shape) || !py::hasattr(shape, "__iter__")) {
    throw py::type_error(
        fmt::format("input_shape must be a tuple of integers (None for the batch), "
                    "got {}",
                    std::string(py::repr(shape))));
  }
  Shape out;
  for (const py::handle& d : shape) {
    if (d.is_none()) {
      out.push_back(1);
    } else if (py::isinstance<py::bool_>(d) || !py::hasattr(d, "__index__")) {
      throw py::type_error(fmt::format("input_shape must be a tuple of integers, got {}",
                                       std::string(py::repr(shape))));
    } else {
      out.push_back(d.attr("__index__")().cast<int64_t>());
    }
  }
  return out;
}

py::tuple shape_tuple(const Shape& s) { return py::tuple(py::cast(s)); }

void bind_tensor_and_variable(py::module_& m) {
  py::class_<Tensor>(m, "KerasTensor",
                     "A symbolic tensor (shape, producing layer) of the functional API, or a "
                     "concrete one (an Array) inside a model's call")
      .def_property_readonly("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def_property_readonly("ndim", [](const Tensor& t) { return t.shape().size(); })
      .def_property_readonly("symbolic", &Tensor::is_symbolic)
      .def_property_readonly("value",
                             [](const Tensor& t) -> py::object {
                               if (t.is_symbolic()) return py::none();
                               return array_to_python(copy_of(t.value()));
                             })
      .def("__repr__", [](const Tensor& t) {
        return fmt::format("<KerasTensor shape={}{}>", shape_to_string(t.shape()),
                           t.is_symbolic() ? "" : " (concrete)");
      });

  py::class_<Variable, VariablePtr>(m, "Variable", "A model weight laid out over a mesh")
      .def_property_readonly("path", &Variable::path, "Keras 3 path: 'my_model/d1/kernel'")
      .def_property_readonly("object_path", &Variable::object_path,
                             "Keras 2 object path: 'd1.kernel'")
      .def_property_readonly("name", &Variable::name)
      .def_property_readonly("shape", [](const Variable& v) { return shape_tuple(v.shape()); })
      .def_property_readonly("dtype",
                             [](const Variable& v) { return python_dtype_name(v.dtype()); })
      .def_property("trainable", &Variable::trainable, &Variable::set_trainable)
      .def_property_readonly("layout", &Variable::layout)
      .def_property_readonly("is_lazy", &Variable::is_lazy)
      .def_property_readonly("value",
                             [](const Variable& v) {
                               HostTensor t;
                               {
                                 py::gil_scoped_release release;
                                 t = v.value().gather();
                               }
                               return numpy_from_host(std::move(t));
                             })
      .def("numpy",
           [](const Variable& v) {
             HostTensor t;
             {
               py::gil_scoped_release release;
               t = v.value().gather();
             }
             return numpy_from_host(std::move(t));
           })
      .def(
          "assign",
          [](Variable& v, const py::object& value) {
            HostTensor t = host_from_numpy(value, "the assigned value", /*allow_scalar=*/true);
            py::gil_scoped_release release;
            v.assign(t);
          },
          py::arg("value"))
      .def(
          "__array__",
          [](const Variable& v, const py::object& dtype) {
            HostTensor t;
            {
              py::gil_scoped_release release;
              t = v.value().gather();
            }
            py::array out = numpy_from_host(std::move(t));
            return dtype.is_none() ? out : py::array(out.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def("__repr__", [](const Variable& v) {
        return fmt::format("<Variable path={}, shape={}, dtype={}{}>", v.path(),
                           shape_to_string(v.shape()), python_dtype_name(v.dtype()),
                           v.layout() ? ", layout=" + v.layout()->to_string() : "");
      });
}

void bind_layer_base(py::module_& m) {
  py::class_<Layer, std::shared_ptr<Layer>>(m, "Layer", py::dynamic_attr())
      .def_property_readonly("name", &Layer::name)
      .def_property_readonly("path", &Layer::path)
      .def_property_readonly("built", &Layer::built)
      .def_property_readonly("dtype", [](const Layer& l) { return python_dtype_name(l.dtype()); })
      .def_property_readonly("weights",
                             [](const Layer& l) { return variables_list(l.weights(), {}); })
      .def_property_readonly("variables",
                             [](const Layer& l) { return variables_list(l.variables(), {}); })
      .def_property_readonly("trainable_weights",
                             [](const Layer& l) { return variables_list(l.weights(), true); })
      .def_property_readonly("non_trainable_weights",
                             [](const Layer& l) { return variables_list(l.weights(), false); })
      .def_property_readonly("losses",
                             [](const Layer& l) {
                               py::gil_scoped_release release;
                               return l.losses();
                             })
      .def("__call__", &call_layer, py::arg("inputs"), py::arg("training") = py::none())
      .def(
          "build",
          [](Layer& l, const py::object& input_shape) {
            const Shape s = shape_arg(input_shape);
            py::gil_scoped_release release;
            l.build_standalone(s);
          },
          py::arg("input_shape"))
      .def(
          "compute_output_shape",
          [](const Layer& l, const py::object& input_shape) {
            return shape_tuple(l.compute_output_shape(shape_arg(input_shape)));
          },
          py::arg("input_shape"))
      .def(
          "enable_lora",
          [](Layer& l, const py::object& rank_arg, const py::object& alpha_arg) {
            if (py::isinstance<py::bool_>(rank_arg) || !py::hasattr(rank_arg, "__index__")) {
              throw py::type_error(fmt::format("enable_lora: rank must be an integer, got {}",
                                               std::string(py::repr(rank_arg))));
            }
            const int64_t rank = rank_arg.attr("__index__")().cast<int64_t>();
            std::optional<double> lora_alpha;
            if (!alpha_arg.is_none()) lora_alpha = py::float_(alpha_arg).cast<double>();
            if (auto* d = dynamic_cast<Dense*>(&l)) return d->enable_lora(rank, lora_alpha);
            if (auto* e = dynamic_cast<EinsumDense*>(&l)) return e->enable_lora(rank, lora_alpha);
            if (auto* c = dynamic_cast<Conv2D*>(&l)) return c->enable_lora(rank, lora_alpha);
            throw ValueError(fmt::format(
                "enable_lora: layer {} has no LoRA (Dense, EinsumDense and Conv2D have)",
                quote(l.name())));
          },
          py::arg("rank"), py::arg("lora_alpha") = py::none())
      .def("_set_training", &Layer::set_training, py::arg("training"))
      .def("_sublayers", &Layer::sublayers)
      .def("__getattr__", &layer_attribute)
      .def("__repr__", [](const Layer& l) {
        return fmt::format("<{} name={}, built={}>",
                           py::str(py::type::of(py::cast(&l)).attr("__name__")).cast<std::string>(),
                           l.name(), l.built() ? "True" : "False");
      });
}

template <typename L>
using LayerClass = py::class_<L, Layer, std::shared_ptr<L>>;

void bind_core_layers(py::module_& m) {
  LayerClass<Dense>(m, "Dense")
      .def(py::init([](int64_t units, const py::dict& o) {
        return std::make_shared<Dense>(
            units, DenseOptions{
                       .name = get<std::string>(o, "name", ""),
                       .activation = activation(o),
                       .use_bias = get<bool>(o, "use_bias", true),
                       .kernel_initializer =
                           initializer(o, "kernel_initializer", Initializer::glorot_uniform()),
                       .bias_initializer = initializer(o, "bias_initializer", Initializer::zeros()),
                       .kernel_regularizer = regularizer(o, "kernel_regularizer"),
                       .bias_regularizer = regularizer(o, "bias_regularizer"),
                       .kernel_layout = layout(o, "kernel_layout"),
                       .bias_layout = layout(o, "bias_layout"),
                   });
      }))
      .def_property_readonly("units", &Dense::units);

  LayerClass<EinsumDense>(m, "EinsumDense")
      .def(py::init([](const std::string& equation, const Shape& output_shape, const py::dict& o) {
        return std::make_shared<EinsumDense>(
            equation, output_shape,
            EinsumDenseOptions{
                .name = get<std::string>(o, "name", ""),
                .bias_axes = get<std::string>(o, "bias_axes", ""),
                .activation = activation(o),
                .kernel_initializer =
                    initializer(o, "kernel_initializer", Initializer::glorot_uniform()),
                .bias_initializer = initializer(o, "bias_initializer", Initializer::zeros()),
                .kernel_layout = layout(o, "kernel_layout"),
                .bias_layout = layout(o, "bias_layout"),
            });
      }));

  LayerClass<Embedding>(m, "Embedding")
      .def(py::init([](int64_t input_dim, int64_t output_dim, const py::dict& o) {
        return std::make_shared<Embedding>(
            input_dim, output_dim,
            EmbeddingOptions{
                .name = get<std::string>(o, "name", ""),
                .embeddings_initializer =
                    initializer(o, "embeddings_initializer", Initializer::random_uniform()),
                .embeddings_layout = layout(o, "embeddings_layout"),
            });
      }));

  py::class_<ReversibleEmbedding, Embedding, std::shared_ptr<ReversibleEmbedding>>(
      m, "ReversibleEmbedding")
      .def(py::init([](int64_t vocab, int64_t hidden, bool tie_weights, const std::string& name) {
        return std::make_shared<ReversibleEmbedding>(vocab, hidden, tie_weights, name);
      }))
      .def_property_readonly("tie_weights", &ReversibleEmbedding::tie_weights);

  LayerClass<GatedFeedForward>(m, "GatedFeedForward")
      .def(py::init([](int64_t intermediate_dim, int64_t output_dim, const py::dict& o) {
        GatedFeedForwardOptions options{.name = get<std::string>(o, "name", "")};
        const std::string act = get<std::string>(o, "activation", "silu");
        if (act == "gelu_tanh" || act == "gelu_approximate") {
          options.activation = GatedActivation::kGeluTanh;
        } else if (act != "silu" && act != "swish") {
          throw ValueError(fmt::format(
              "GatedFeedForward: activation {} is not supported, expected 'silu' or 'gelu_tanh'",
              quote(act)));
        }
        options.kernel_initializer =
            initializer(o, "kernel_initializer", Initializer::glorot_uniform());
        return std::make_shared<GatedFeedForward>(intermediate_dim, output_dim, options);
      }));

  LayerClass<ActivationLayer>(m, "Activation")
      .def(py::init([](const std::string& activation, const std::string& name) {
        return std::make_shared<ActivationLayer>(parse_activation(activation), name);
      }));

  LayerClass<Dropout>(m, "Dropout").def(py::init([](double rate, const py::dict& o) {
    DropoutOptions options{.name = get<std::string>(o, "name", "")};
    if (has(o, "seed")) options.seed = o["seed"].cast<uint64_t>();
    return std::make_shared<Dropout>(rate, options);
  }));

  LayerClass<Reshape>(m, "Reshape").def(py::init([](const Shape& target, const py::dict& o) {
    return std::make_shared<Reshape>(target,
                                     ReshapeOptions{.name = get<std::string>(o, "name", "")});
  }));
  LayerClass<Flatten>(m, "Flatten").def(py::init([](const py::dict& o) {
    return std::make_shared<Flatten>(FlattenOptions{.name = get<std::string>(o, "name", "")});
  }));

  py::class_<MergeLayer, Layer, std::shared_ptr<MergeLayer>>(m, "_Merge");
  py::class_<Add, MergeLayer, std::shared_ptr<Add>>(m, "Add").def(
      py::init([](const std::string& name) { return std::make_shared<Add>(name); }));
  py::class_<Multiply, MergeLayer, std::shared_ptr<Multiply>>(m, "Multiply")
      .def(py::init([](const std::string& name) { return std::make_shared<Multiply>(name); }));
  py::class_<Concatenate, MergeLayer, std::shared_ptr<Concatenate>>(m, "Concatenate")
      .def(py::init([](int64_t axis, const std::string& name) {
        return std::make_shared<Concatenate>(axis, name);
      }))
      .def_property_readonly("axis", &Concatenate::axis);
}

void bind_other_layers(py::module_& m) {
  LayerClass<Conv2D>(m, "Conv2D").def(py::init([](int64_t filters, const py::dict& o) {
    return std::make_shared<Conv2D>(
        filters, Conv2DOptions{
                     .name = get<std::string>(o, "name", ""),
                     .kernel_size = pair(o, "kernel_size", {3, 3}),
                     .strides = pair(o, "strides", {1, 1}),
                     .padding = get<std::string>(o, "padding", "valid"),
                     .activation = activation(o),
                     .use_bias = get<bool>(o, "use_bias", true),
                     .kernel_initializer =
                         initializer(o, "kernel_initializer", Initializer::glorot_uniform()),
                     .bias_initializer = initializer(o, "bias_initializer", Initializer::zeros()),
                     .kernel_regularizer = regularizer(o, "kernel_regularizer"),
                     .bias_regularizer = regularizer(o, "bias_regularizer"),
                     .kernel_layout = layout(o, "kernel_layout"),
                     .bias_layout = layout(o, "bias_layout"),
                 });
  }));

  LayerClass<SeparableConv2D>(m, "SeparableConv2D")
      .def(py::init([](int64_t filters, const py::dict& o) {
        SeparableConv2DOptions options{
            .name = get<std::string>(o, "name", ""),
            .kernel_size = pair(o, "kernel_size", {3, 3}),
            .strides = pair(o, "strides", {1, 1}),
            .padding = get<std::string>(o, "padding", "valid"),
            .depth_multiplier = get<int64_t>(o, "depth_multiplier", 1),
            .activation = activation(o),
            .use_bias = get<bool>(o, "use_bias", true),
            .depthwise_initializer =
                initializer(o, "depthwise_initializer", Initializer::glorot_uniform()),
            .pointwise_initializer =
                initializer(o, "pointwise_initializer", Initializer::glorot_uniform()),
            .bias_initializer = initializer(o, "bias_initializer", Initializer::zeros()),
        };
        options.depthwise_regularizer = regularizer(o, "depthwise_regularizer");
        options.pointwise_regularizer = regularizer(o, "pointwise_regularizer");
        options.bias_regularizer = regularizer(o, "bias_regularizer");
        options.depthwise_kernel_layout = layout(o, "depthwise_kernel_layout");
        options.pointwise_kernel_layout = layout(o, "pointwise_kernel_layout");
        options.bias_layout = layout(o, "bias_layout");
        return std::make_shared<SeparableConv2D>(filters, options);
      }));

  LayerClass<PReLU>(m, "PReLU").def(py::init([](const py::dict& o) {
    return std::make_shared<PReLU>(PReLUOptions{
        .name = get<std::string>(o, "name", ""),
        .alpha_initializer = initializer(o, "alpha_initializer", Initializer::zeros()),
        .alpha_regularizer = regularizer(o, "alpha_regularizer"),
        .shared_axes = get<std::vector<int64_t>>(o, "shared_axes", {}),
        .alpha_layout = layout(o, "alpha_layout"),
    });
  }));

  LayerClass<LayerNormalization>(m, "LayerNormalization").def(py::init([](const py::dict& o) {
    return std::make_shared<LayerNormalization>(LayerNormalizationOptions{
        .name = get<std::string>(o, "name", ""),
        .epsilon = get<double>(o, "epsilon", 1e-3),
        .center = get<bool>(o, "center", true),
        .scale = get<bool>(o, "scale", true),
        .beta_initializer = initializer(o, "beta_initializer", Initializer::zeros()),
        .gamma_initializer = initializer(o, "gamma_initializer", Initializer::ones()),
        .beta_layout = layout(o, "beta_layout"),
        .gamma_layout = layout(o, "gamma_layout"),
    });
  }));

  LayerClass<RMSNormalization>(m, "RMSNormalization").def(py::init([](const py::dict& o) {
    return std::make_shared<RMSNormalization>(RMSNormalizationOptions{
        .name = get<std::string>(o, "name", ""),
        .epsilon = get<double>(o, "epsilon", 1e-6),
        .scale_initializer = initializer(o, "scale_initializer", Initializer::ones()),
        .scale_layout = layout(o, "scale_layout"),
    });
  }));

  LayerClass<BatchNormalization>(m, "BatchNormalization").def(py::init([](const py::dict& o) {
    BatchNormalizationOptions options{
        .name = get<std::string>(o, "name", ""),
        .epsilon = get<double>(o, "epsilon", 1e-3),
        .momentum = get<double>(o, "momentum", 0.99),
        .center = get<bool>(o, "center", true),
        .scale = get<bool>(o, "scale", true),
        .beta_initializer = initializer(o, "beta_initializer", Initializer::zeros()),
        .gamma_initializer = initializer(o, "gamma_initializer", Initializer::ones()),
        .moving_mean_initializer = initializer(o, "moving_mean_initializer", Initializer::zeros()),
        .moving_variance_initializer =
            initializer(o, "moving_variance_initializer", Initializer::ones()),
    };
    options.beta_layout = layout(o, "beta_layout");
    options.gamma_layout = layout(o, "gamma_layout");
    options.moving_mean_layout = layout(o, "moving_mean_layout");
    options.moving_variance_layout = layout(o, "moving_variance_layout");
    return std::make_shared<BatchNormalization>(options);
  }));

  LayerClass<LSTM>(m, "LSTM").def(py::init([](int64_t units, const py::dict& o) {
    return std::make_shared<LSTM>(
        units, LSTMOptions{
                   .name = get<std::string>(o, "name", ""),
                   .use_bias = get<bool>(o, "use_bias", true),
                   .unit_forget_bias = get<bool>(o, "unit_forget_bias", true),
                   .return_sequences = get<bool>(o, "return_sequences", false),
                   .kernel_initializer =
                       initializer(o, "kernel_initializer", Initializer::glorot_uniform()),
                   .recurrent_initializer =
                       initializer(o, "recurrent_initializer", Initializer::orthogonal()),
                   .bias_initializer = initializer(o, "bias_initializer", Initializer::zeros()),
               });
  }));

  LayerClass<MultiHeadAttention>(m, "MultiHeadAttention")
      .def(py::init([](int64_t num_heads, int64_t key_dim, const py::dict& o) {
        MultiHeadAttentionOptions options{
            .num_heads = num_heads,
            .key_dim = key_dim,
            .num_key_value_heads = get<int64_t>(o, "num_key_value_heads", 0),
            .use_bias = get<bool>(o, "use_bias", true),
            .causal = get<bool>(o, "use_causal_mask", false),
            .rope_theta = get<double>(o, "rope_theta", 0.0),
        };
        options.name = get<std::string>(o, "name", "");
        options.kernel_initializer =
            initializer(o, "kernel_initializer", Initializer::glorot_uniform());
        return std::make_shared<MultiHeadAttention>(options);
      }));
}

}  // namespace

void bind_layers(py::module_& m) {
  bind_tensor_and_variable(m);
  bind_layer_base(m);
  bind_core_layers(m);
  bind_other_layers(m);
  m.def("_initializer_names", &Initializer::names);
  m.def(
      "_check_initializer",
      [](const std::string& text) { return Initializer::from_string(text).to_string(); },
      py::arg("text"));
  m.def("_auto_name", &auto_name, py::arg("prefix"));
  m.def("clear_session", &clear_session,
        "Forgets automatic layer and optimizer names (keras.backend.clear_session()).");
}

}  // namespace meshlayout::python
