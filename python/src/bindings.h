// bindings.h — shared pieces of the Python module meshlayout._meshlayout (pybind11): the
// per-area binders, dtype mapping between meshlayout and numpy, and the I/O error mapping.
//
// Example (module.cc):
//   PYBIND11_MODULE(_meshlayout, m) { bind_layout(m); bind_layout_map(m); bind_array(m); }
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <utility>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/device_mesh.h"

namespace meshlayout {
class Array;
class LayoutMap;
}  // namespace meshlayout

namespace meshlayout::python {

namespace py = pybind11;

void bind_layout(py::module_& m);      // DeviceMesh, TensorLayout, devices
void bind_layout_map(py::module_& m);  // LayoutMap and its scope
void bind_rules(py::module_& m);       // rules in other dialects (rules/rule_dialects.h)
void bind_tokenizer(py::module_& m);   // Tokenizer: text to token ids and back
void bind_array(py::module_& m);       // Array, distribute_tensor, device memory
void bind_io(py::module_& m);          // checkpoints: open, inspect, plan, load, save
// DataParallel, ModelParallel, the thread's current distribution as C++ sees it
void bind_distribution(py::module_& m);
void bind_models(py::module_& m);  // ModelConfig, CausalLM (every family), write_random_model

/// A DeviceMesh argument: None or a DeviceMesh, else TypeError naming `what` and the value.
std::optional<DeviceMesh> mesh_argument(const py::object& value, const char* what);

/// The C++ map under a Python LayoutMap (bind_layout_map.cc).
const LayoutMap& layout_map_of(const py::handle& obj);

/// Wraps an Array for Python.
py::object array_to_python(Array array);

/// The numpy dtype holding a DType's elements. BF16 has none in numpy: ml_dtypes.bfloat16 when
/// the ml_dtypes package imports, else its raw bits as uint16.
py::dtype numpy_dtype(DType dtype);
/// The DType of a numpy dtype (ml_dtypes.bfloat16 is BF16); ValueError naming it for dtypes
/// meshlayout lacks.
DType dtype_from_numpy(const py::dtype& dtype);
/// Keras' dtype strings: "float32", "bfloat16", "int8", "bool", …
std::string python_dtype_name(DType dtype);

/// Runs `f` (which may release the GIL); meshlayout's I/O failures (a file that cannot be
/// opened, read or written, or is corrupt) become OSError (FileNotFoundError for a missing
/// file) with the C++ message. ValueError stays ValueError; with `missing_is_key`, a
/// NotFoundError is a missing tensor name (KeyError), not a missing file.
template <typename F>
auto io_call(F&& f, bool missing_is_key = false) {
  try {
    return std::forward<F>(f)();
  } catch (const NotFoundError& e) {
    if (missing_is_key) throw;
    PyErr_SetString(PyExc_FileNotFoundError, e.what());
    throw py::error_already_set();
  } catch (const ValueError&) {
    throw;
  } catch (const Error& e) {  // DataLossError and the failed system calls
    PyErr_SetString(PyExc_OSError, e.what());
    throw py::error_already_set();
  }
}

}  // namespace meshlayout::python
