// bind_model.cc — models from Python (issue 29 item 1): Model, subclassable in Python (its
// call() runs in Python on KerasTensors; meshlayout/__init__.py's Model.__setattr__ tracks layer
// attributes as Keras does, so object paths are "d1.kernel", "blocks.0.kernel" and Keras 3
// paths "my_model/d1/kernel"), functional Model(inputs, outputs), Sequential and Input. A
// Python-subclassed model trains through the graph of its call traced once on a symbolic
// input (a functional model over the same layers and variables).
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/model.h"
#include "nn_bindings.h"

namespace meshlayout::python {
namespace {

// A model subclassed in Python: call() is the Python method.
class PyModel : public Model {
 public:
  PyModel(std::string name, const std::string& class_name) : Model(std::move(name), class_name) {}

  void track_layer(const std::string& attr, const std::shared_ptr<Layer>& layer) {
    for (const auto& [name, existing] : tracked_) {
      if (name == attr) {
        throw ValueError(fmt::format(
            "model {}: attribute {} already holds a tracked layer; meshlayout cannot replace a "
            "tracked layer",
            quote(this->name()), quote(attr)));
      }
    }
    (void)track(attr, layer);
  }

  Tensor call(const Tensor& x) override {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const Model*>(this), "call");
    if (!f) {
      throw FailedPreconditionError(
          fmt::format("model {} has no call() method: a Model subclass defines call(self, inputs)",
                      quote(name())));
    }
    py::object out;
    try {
      out = f(x);
    } catch (py::error_already_set& e) {
      // Math of the layer's own on a KerasTensor (arithmetic, numpy functions): not a layer
      // meshlayout knows the backward of.
      if (!x.is_symbolic() || (!e.matches(PyExc_TypeError) && !e.matches(PyExc_AttributeError))) {
        throw;
      }
      throw py::type_error(fmt::format(
          "{} {} ({}.call): meshlayout cannot differentiate Python math of a custom layer or "
          "model: its call() must compose meshlayout layers (Dense, Activation, Add, Multiply, "
          "…) on the KerasTensors it gets; the call raised {}: {}",
          kind(), quote(name()), class_name(),
          py::str(e.type().attr("__name__")).cast<std::string>(),
          py::str(e.value()).cast<std::string>()));
    }
    if (py::isinstance<Tensor>(out)) return out.cast<Tensor>();
    if (py::isinstance<Array>(out)) {
      const Array& a = out.cast<const Array&>();
      return Tensor(distribute_tensor(a, a.layout()));
    }
    throw py::type_error(fmt::format(
        "{} {} ({}.call) must return the KerasTensor its layers computed, got {}: meshlayout "
        "cannot differentiate Python math of a custom layer or model",
        kind(), quote(name()), class_name(),
        py::str(py::type::of(out).attr("__name__")).cast<std::string>()));
  }

  Array backward(const Array& x, const Array& dy, Gradients& grads) override {
    return graph(x.shape()).backward(x, dy, grads);
  }
  Array recompute(const Array& x) override { return graph(x.shape()).recompute(x); }

 private:
  // The Python class's name, and whether it is a custom Layer or a Model (GIL held).
  std::string class_name() const {
    return py::str(py::type::of(py::cast(static_cast<const Model*>(this))).attr("__name__"));
  }
  std::string kind() const {
    return py::cast(static_cast<const Model*>(this)).attr("_ml_kind").cast<std::string>();
  }

  // The layer graph of call(), traced once on a symbolic input in the model's scope.
  Model& graph(const Shape& shape) {
    if (!built()) {
      throw FailedPreconditionError(
          fmt::format("model {} is not built: call it before its backward", quote(name())));
    }
    if (!graph_) {
      NameScope scope = open_name_scope();
      const Tensor in = Tensor::symbolic(shape);
      const Tensor out = call(in);
      graph_ = Model::functional(in, out, name() + "_graph");
    }
    return *graph_;
  }
  std::shared_ptr<Model> graph_;
};

// A layer as a C++ owner (a Sequential, a model's tracked attribute, a graph's producer) holds
// it: for a layer or model subclassed in Python, a pointer that also holds the Python object, so
// that its call() (the Python method) outlives the user's last reference to it. No cycle: the
// Python object holds the C++ layer, the owner holds the Python object.
std::shared_ptr<Layer> owning(const py::handle& obj) {
  auto layer = obj.cast<std::shared_ptr<Layer>>();
  if (dynamic_cast<PyModel*>(layer.get()) == nullptr) return layer;
  std::shared_ptr<py::object> keep(new py::object(py::reinterpret_borrow<py::object>(obj)),
                                   [](py::object* o) {
                                     if (Py_IsInitialized() == 0) {
                                       (void)o->release();  // the interpreter is gone
                                     } else {
                                       py::gil_scoped_acquire gil;
                                       o->dec_ref();
                                       (void)o->release();
                                     }
                                     delete o;
                                   });
  return std::shared_ptr<Layer>(keep, layer.get());
}

Shape shape_of(const py::object& shape, const char* what) {
  if (py::isinstance<py::str>(shape) || !py::hasattr(shape, "__iter__")) {
    throw py::type_error(
        fmt::format("{} must be a tuple of integers, got {}", what, std::string(py::repr(shape))));
  }
  Shape out;
  for (const py::handle& d : shape) {
    if (d.is_none()) {
      throw ValueError(fmt::format(
          "{} {}: meshlayout needs every dimension but the batch's (None is only allowed for the "
          "batch dimension)",
          what, std::string(py::repr(shape))));
    }
    if (py::isinstance<py::bool_>(d) || !py::hasattr(d, "__index__")) {
      throw py::type_error(fmt::format("{} must be a tuple of integers, got {}", what,
                                       std::string(py::repr(shape))));
    }
    out.push_back(d.attr("__index__")().cast<int64_t>());
  }
  return out;
}

std::shared_ptr<Model> functional(const py::object& inputs, const Tensor& outputs,
                                  const std::string& name) {
  std::vector<Tensor> ins;
  if (py::isinstance<Tensor>(inputs)) {
    ins.push_back(inputs.cast<Tensor>());
  } else {
    for (const py::handle& t : inputs) {
      if (!py::isinstance<Tensor>(t)) {
        throw py::type_error(fmt::format(
            "Model(inputs, outputs): every input must be a KerasTensor (from Input), got {}",
            py::str(py::type::of(t).attr("__name__")).cast<std::string>()));
      }
      ins.push_back(t.cast<Tensor>());
    }
  }
  py::gil_scoped_release release;
  return Model::functional(ins, outputs, name);
}

}  // namespace

HostTensor host_from_numpy(const py::object& value, const char* what, bool allow_scalar) {
  if (py::isinstance<Array>(value)) {
    const Array& a = value.cast<const Array&>();
    py::gil_scoped_release release;
    return a.gather();
  }
  py::array arr;
  try {
    arr = py::module_::import("numpy").attr("asarray")(value, py::arg("order") = "C");
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_ValueError) && !e.matches(PyExc_TypeError)) throw;
    throw ValueError(fmt::format("{} does not convert to a numpy array: {}", what,
                                 py::str(e.value()).cast<std::string>()));
  }
  if (arr.ndim() == 0 && !allow_scalar) {
    throw ValueError(fmt::format("{} must have a batch dimension, got a 0-d array", what));
  }
  DType dtype;
  try {
    dtype = dtype_from_numpy(arr.dtype());
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", what, e.what()));
  }
  HostTensor out(dtype, Shape(arr.shape(), arr.shape() + arr.ndim()));
  std::memcpy(out.data(), arr.data(), out.num_bytes());
  return out;
}

py::array numpy_from_host(HostTensor tensor) {
  auto owner = std::make_unique<HostTensor>(std::move(tensor));
  HostTensor* t = owner.get();
  py::capsule capsule(owner.release(), [](void* p) { delete static_cast<HostTensor*>(p); });
  return py::array(numpy_dtype(t->dtype()),
                   std::vector<py::ssize_t>(t->shape().begin(), t->shape().end()), t->data(),
                   capsule);
}

std::shared_ptr<const Distribution> feed_distribution(const Layer& layer) {
  if (const auto* model = dynamic_cast<const Model*>(&layer)) {
    if (model->distribution()) return model->distribution();
    if (model->layout_map() && model->layout_map()->device_mesh()) {
      return std::make_shared<ModelParallel>(*model->layout_map());
    }
  }
  if (auto d = distribution()) return d;
  if (const LayoutMap* map = current_layout_map(); map && map->device_mesh()) {
    return std::make_shared<ModelParallel>(*map);
  }
  for (const VariablePtr& v : layer.variables()) {
    if (!v->is_lazy()) return std::make_shared<DataParallel>(v->value().mesh());
  }
  // layer.cc's mesh of the weights of a layer built outside any scope.
  return std::make_shared<DataParallel>(
      DeviceMesh({1}, {"replica"}, std::vector<std::string>{"cpu:0"}));
}

void bind_model(py::module_& m) {
  py::class_<Model, PyModel, Layer, std::shared_ptr<Model>>(m, "Model", py::dynamic_attr())
      .def(py::init_alias<std::string, const std::string&>(), py::arg("name"),
           py::arg("class_name"))
      .def_property_readonly("layers",
                             [](const Model& model) {
                               py::list out;
                               for (const auto& l : model.layers()) out.append(py::cast(l));
                               return out;
                             })
      .def("summary",
           [](const Model& model) {
             py::gil_scoped_release release;
             return model.summary();
           })
      .def(
          "_track",
          [](Model& model, const std::string& attr, const py::object& layer) {
            auto* py_model = dynamic_cast<PyModel*>(&model);
            if (!py_model) return;  // a C++ model (functional, Sequential) tracks nothing more
            py_model->track_layer(attr, owning(layer));
          },
          py::arg("attr"), py::arg("layer"));
  // The KerasTensor a Python-subclassed layer returned, its producer holding the Python object.
  m.def(
      "_owned_output",
      [](const Tensor& out, const py::object& layer) {
        if (!out.is_symbolic() || out.producer() == nullptr) return out;
        return Tensor::symbolic(out.shape(), owning(layer), out.inputs());
      },
      py::arg("output"), py::arg("layer"));

  py::class_<Sequential, Model, std::shared_ptr<Sequential>>(m, "Sequential")
      .def(py::init([](const py::list& layer_objects, const std::string& name,
                       const std::optional<std::vector<int64_t>>& input_shape) {
             std::vector<std::shared_ptr<Layer>> layers;
             for (const py::handle& l : layer_objects) layers.push_back(owning(l));
             SequentialOptions options{.name = name};
             if (input_shape) options.input_shape = Shape(input_shape->begin(), input_shape->end());
             py::gil_scoped_release release;
             return std::make_shared<Sequential>(layers, options);
           }),
           py::arg("layers"), py::arg("name"), py::arg("input_shape"))
      .def(
          "_add",
          [](Sequential& model, const py::object& layer_object) {
            std::shared_ptr<Layer> layer = owning(layer_object);
            py::gil_scoped_release release;
            model.add(std::move(layer));
          },
          py::arg("layer"))
      .def("_pop", [](Sequential& model) {
        py::gil_scoped_release release;
        return model.pop();
      });

  m.def("_functional", &functional, py::arg("inputs"), py::arg("outputs"), py::arg("name"));
  m.def(
      "Input",
      [](const py::object& shape, const py::object& batch_size) {
        const Shape s = shape_of(shape, "Input shape");
        return Input(s, batch_size.is_none() ? 1 : batch_size.cast<int64_t>());
      },
      py::arg("shape"), py::arg("batch_size") = py::none());
  m.def("_to_snake_case", &to_snake_case, py::arg("class_name"));
}

}  // namespace meshlayout::python
