// module.cc — the extension module meshlayout._meshlayout: error translation and the binders.
// The public Python API is the package meshlayout (python/meshlayout/__init__.py).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "meshlayout/core/errors.h"
#include "nn_bindings.h"

namespace meshlayout::python {
namespace {

// meshlayout's errors as Python's (errors.h): ValueError, KeyError, MemoryError, RuntimeError; I/O
// calls map theirs to OSError themselves (io_call).
void translate_errors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const NotFoundError& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    } catch (const ResourceExhaustedError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
}

}  // namespace

PYBIND11_MODULE(_meshlayout, m) {
  m.doc() =
      "meshlayout: Keras' distribution API (DeviceMesh, TensorLayout, LayoutMap, "
      "distribute_tensor) on virtual CPU devices";
  translate_errors();
  bind_layout(m);
  bind_layout_map(m);
  bind_rules(m);
  bind_array(m);
  bind_io(m);
  bind_distribution(m);
  bind_models(m);
  bind_tokenizer(m);
  py::module_ nn = m.def_submodule("_nn", "layers, models and training (meshlayout.layers, …)");
  bind_layers(nn);
  bind_model(nn);
  bind_train(nn);
  bind_training_state(nn);
}

}  // namespace meshlayout::python
