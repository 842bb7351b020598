// bind_layout.cc — DeviceMesh, TensorLayout, list_devices and get_device_count, with Keras'
// names: DeviceMesh(shape, axis_names, devices=None) whose .devices is a numpy array of the
// mesh's shape, TensorLayout(axes, device_mesh=None) whose device_mesh can be set once.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/tensor_layout.h"

namespace meshlayout::python {
namespace {

DimSharding dim_from_python(py::handle h) {
  if (h.is_none()) return DimSharding();
  if (py::isinstance<py::str>(h)) return DimSharding(h.cast<std::string>());
  if (py::isinstance<py::tuple>(h) || py::isinstance<py::list>(h)) {
    return DimSharding(h.cast<std::vector<std::string>>());
  }
  throw ValueError(
      fmt::format("a TensorLayout axis is None, a mesh axis name or a tuple of names, got {}",
                  std::string(py::repr(h))));
}

py::object dim_to_python(const DimSharding& d) {
  if (!d.is_sharded()) return py::none();
  if (d.axes().size() == 1) return py::str(d.axes()[0]);
  return py::tuple(py::cast(d.axes()));
}

py::tuple axes_to_python(const TensorLayout& layout) {
  py::tuple out(layout.axes().size());
  for (size_t i = 0; i < layout.axes().size(); ++i) out[i] = dim_to_python(layout.axes()[i]);
  return out;
}

// Keras: `<DeviceMesh shape=(2, 4), axis_names=['batch', 'model']>`.
std::string mesh_repr(const DeviceMesh& mesh) {
  return fmt::format("<DeviceMesh shape={}, axis_names={}>", shape_to_string(mesh.shape()),
                     repr_list(mesh.axis_names()));
}

// Keras takes any sequence for shape and axis_names (tuples, lists, numpy arrays and integers)
// and checks emptiness first: "Shape and axis_names cannot be empty."
std::vector<int64_t> mesh_shape_from_python(const py::object& shape) {
  std::vector<int64_t> out;
  if (py::isinstance<py::str>(shape) || !py::isinstance<py::iterable>(shape)) {
    throw py::type_error(fmt::format("DeviceMesh shape must be a sequence of integers, got {}",
                                     std::string(py::repr(shape))));
  }
  for (py::handle e : shape) {
    if (py::isinstance<py::bool_>(e) || !py::hasattr(e, "__index__")) {
      throw py::type_error(fmt::format("DeviceMesh shape must hold integers, got {} in {}",
                                       std::string(py::repr(e)), std::string(py::repr(shape))));
    }
    out.push_back(py::cast<int64_t>(e.attr("__index__")()));
  }
  return out;
}

std::vector<std::string> axis_names_from_python(const py::object& axis_names) {
  std::vector<std::string> out;
  if (!py::isinstance<py::iterable>(axis_names)) {
    throw py::type_error(fmt::format("DeviceMesh axis_names must be a sequence of strings, got {}",
                                     std::string(py::repr(axis_names))));
  }
  for (py::handle e : axis_names) {  // a str is a sequence of its characters, as in Keras
    if (!py::isinstance<py::str>(e)) {
      throw py::type_error(fmt::format("DeviceMesh axis_names must hold strings, got {} in {}",
                                       std::string(py::repr(e)),
                                       std::string(py::repr(axis_names))));
    }
    out.push_back(py::cast<std::string>(e));
  }
  return out;
}

DeviceMesh make_mesh(const py::object& shape_arg, const py::object& axis_names_arg,
                     const py::object& devices) {
  const std::vector<int64_t> shape = mesh_shape_from_python(shape_arg);
  const std::vector<std::string> axis_names = axis_names_from_python(axis_names_arg);
  if (devices.is_none()) return DeviceMesh(shape, axis_names);
  // Keras: np.array(devices), any shape; only the element count must match.
  py::object flat = py::module_::import("numpy").attr("asarray")(devices).attr("ravel")();
  std::vector<std::string> names;
  for (py::handle d : flat) names.push_back(py::str(d));
  return DeviceMesh(shape, axis_names, std::move(names));
}

// Keras' list_devices(device_type=None): None is the default type, names are lower-cased.
std::string keras_device_type(const std::optional<std::string>& device_type) {
  if (!device_type || device_type->empty()) return "cpu";
  std::string out = *device_type;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<DeviceMesh> mesh_argument(const py::object& value, const char* what) {
  if (value.is_none()) return std::nullopt;
  if (!py::isinstance<DeviceMesh>(value)) {
    throw py::type_error(fmt::format("{} must be a DeviceMesh or None, got {} (of type {})", what,
                                     std::string(py::repr(value)),
                                     std::string(py::str(py::type::of(value)))));
  }
  return value.cast<DeviceMesh>();
}

void bind_layout(py::module_& m) {
  m.def(
      "list_devices",
      [](const std::optional<std::string>& device_type) {
        return list_devices(keras_device_type(device_type));
      },
      py::arg("device_type") = py::none(),
      "Global device names cpu:0 … cpu:N-1 (N from MESHLAYOUT_CPU_DEVICES, default 8). "
      "device_type: None (the default type, cpu) or a type name in any case, as Keras.");
  m.def(
      "get_device_count",
      [](const std::optional<std::string>& device_type) {
        return list_devices(keras_device_type(device_type)).size();
      },
      py::arg("device_type") = py::none(), "Number of devices of `device_type` (default cpu).");

  py::class_<DeviceMesh>(m, "DeviceMesh")
      .def(py::init(&make_mesh), py::arg("shape"), py::arg("axis_names"),
           py::arg("devices") = py::none())
      .def_property_readonly("shape",
                             [](const DeviceMesh& d) { return py::tuple(py::cast(d.shape())); })
      .def_property_readonly("axis_names",
                             [](const DeviceMesh& d) { return py::list(py::cast(d.axis_names())); })
      .def_property_readonly("devices",
                             [](const DeviceMesh& d) {
                               py::module_ np = py::module_::import("numpy");
                               py::object arr = np.attr("array")(py::cast(d.devices()),
                                                                 py::arg("dtype") = "object");
                               return arr.attr("reshape")(py::tuple(py::cast(d.shape())));
                             })
      .def_property_readonly("size", &DeviceMesh::size)
      .def("to_string", &DeviceMesh::to_string)
      .def_static("from_string", &DeviceMesh::from_string)
      .def("__repr__", &mesh_repr)
      .def("__eq__",
           [](const DeviceMesh& a, const py::object& b) {
             return py::isinstance<DeviceMesh>(b) && a == b.cast<const DeviceMesh&>();
           })
      .def("__hash__", [](const DeviceMesh& d) { return py::hash(py::str(d.to_string())); });

  py::class_<TensorLayout>(m, "TensorLayout")
      .def(py::init([](const py::object& axes, const py::object& mesh) {
             if (!py::isinstance<py::iterable>(axes)) {
               throw py::type_error(fmt::format(
                   "TensorLayout axes must be a sequence of mesh axis names, tuples of names or "
                   "None, got {}",
                   std::string(py::repr(axes))));
             }
             std::vector<DimSharding> dims;
             for (py::handle a : axes) dims.push_back(dim_from_python(a));
             return TensorLayout(std::move(dims), mesh_argument(mesh, "TensorLayout device_mesh"));
           }),
           py::arg("axes"), py::arg("device_mesh") = py::none())
      .def_property_readonly("axes", &axes_to_python)
      .def_property(
          "device_mesh", [](const TensorLayout& l) { return l.device_mesh(); },
          [](TensorLayout& l, const py::object& value) {
            std::optional<DeviceMesh> mesh = mesh_argument(value, "TensorLayout.device_mesh");
            if (mesh) {
              l.set_device_mesh(*mesh);  // Keras: ValueError if one is already set
            } else if (l.device_mesh()) {
              throw ValueError(
                  fmt::format("Cannot override device mesh value. Existing value is {}",
                              mesh_repr(*l.device_mesh())));
            }
          })
      .def_property_readonly("rank", &TensorLayout::rank)
      .def("to_string", &TensorLayout::to_string)
      .def_static("from_string", &TensorLayout::from_string)
      .def("__repr__",
           [](const TensorLayout& l) {
             return fmt::format("<TensorLayout axes={}, device_mesh={}>",
                                std::string(py::repr(axes_to_python(l))),
                                l.device_mesh() ? mesh_repr(*l.device_mesh()) : "None");
           })
      .def("__eq__", [](const TensorLayout& a, const py::object& b) {
        return py::isinstance<TensorLayout>(b) && a == b.cast<const TensorLayout&>();
      });
}

// ml_dtypes.bfloat16 when the ml_dtypes package imports, else none (looked up once; kept for
// the life of the process, as the interpreter keeps the module).
const py::object* bfloat16_dtype() {
  static const py::object* cached = [] {
    try {
      return new py::object(py::module_::import("ml_dtypes").attr("bfloat16"));
    } catch (py::error_already_set&) {
      return static_cast<py::object*>(nullptr);
    }
  }();
  return cached;
}

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return py::dtype("float32");
    case DType::kF64:
      return py::dtype("float64");
    case DType::kF16:
      return py::dtype("float16");
    case DType::kBF16:  // numpy has no bfloat16: ml_dtypes' if installed, else the raw bits
      if (const py::object* bf16 = bfloat16_dtype()) return py::dtype::from_args(*bf16);
      return py::dtype("uint16");
    case DType::kI8:
      return py::dtype("int8");
    case DType::kI16:
      return py::dtype("int16");
    case DType::kI32:
      return py::dtype("int32");
    case DType::kI64:
      return py::dtype("int64");
    case DType::kU8:
      return py::dtype("uint8");
    case DType::kBool:
      return py::dtype("bool");
  }
  throw InternalError("numpy_dtype: unknown DType");
}

std::string python_dtype_name(DType dtype) {
  return dtype == DType::kBF16 ? "bfloat16" : std::string(py::str(py::handle(numpy_dtype(dtype))));
}

DType dtype_from_numpy(const py::dtype& dtype) {
  const char kind = dtype.kind();
  if (dtype.byteorder() == '>') {
    throw ValueError(
        fmt::format("numpy dtype {} is big-endian; meshlayout stores little-endian "
                    "(use x.astype(x.dtype.newbyteorder('<')))",
                    std::string(py::str(py::handle(dtype)))));
  }
  if (kind == 'b' || kind == 'f' || kind == 'i' || (kind == 'u' && dtype.itemsize() == 1)) {
    return parse_dtype(std::string(py::str(py::handle(dtype))));
  }
  if (dtype.itemsize() == 2 && std::string(py::str(py::handle(dtype))) == "bfloat16") {
    return DType::kBF16;  // ml_dtypes.bfloat16
  }
  throw ValueError(fmt::format(
      "numpy dtype {} has no meshlayout dtype (float16/32/64, int8/16/32/64, uint8, bool)",
      std::string(py::str(py::handle(dtype)))));
}

}  // namespace meshlayout::python
