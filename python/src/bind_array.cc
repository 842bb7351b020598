// bind_array.cc — Array and distribute_tensor for Python: distribute_tensor(x, layout) takes a
// numpy array (or anything numpy.asarray takes) or an Array; numpy.asarray(array) gathers;
// array.addressable_shards[i].data is a read-only numpy view of one device's shard (no copy).
// The GIL is released while bytes move (only C++ runs then: Python objects are made, read and
// freed with the GIL held), and an error leaves no device memory behind (the Array being built
// is freed as the exception leaves). Input numpy cannot convert raises Python's error.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "meshlayout/array/array.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout::python {
namespace {

using ArrayPtr = std::shared_ptr<Array>;

struct PyShard {
  std::string device;
  py::tuple index;  // numpy slices of the global tensor
  py::array data;   // read-only view of the device buffer
};

std::vector<py::ssize_t> extents(const Shape& shape) { return {shape.begin(), shape.end()}; }

// A read-only numpy array over `data`, keeping `base` alive.
py::array view(DType dtype, const Shape& shape, const void* data, py::handle base) {
  py::array out(numpy_dtype(dtype), extents(shape), data, base);
  out.attr("flags").attr("writeable") = false;
  return out;
}

py::array host_to_numpy(HostTensor tensor) {
  auto owner = std::make_unique<HostTensor>(std::move(tensor));
  HostTensor* t = owner.get();
  py::capsule capsule(owner.release(), [](void* p) { delete static_cast<HostTensor*>(p); });
  py::array out(numpy_dtype(t->dtype()), extents(t->shape()), t->data(), capsule);
  return out;
}

// The name of x's type, for messages: "list", "ndarray", "NoneType".
std::string type_name(const py::handle& x) {
  return py::str(py::type::of(x).attr("__name__")).cast<std::string>();
}

// numpy.asarray(x, order="C"): C order, native byte order kept, a copy only of non-contiguous
// input or of what is not an array yet. py::array::ensure would clear numpy's exception and
// return null; here a failed conversion raises: numpy's error unchanged (MemoryError, whatever
// an __array__ raised), except ValueError and TypeError (a ragged list, ...), which become the
// same type with what was passed and what is expected, chained to numpy's.
py::array to_numpy(const py::object& x) {
  try {
    return py::module_::import("numpy").attr("asarray")(x, py::arg("order") = "C");
  } catch (py::error_already_set& e) {
    const bool value_error = e.matches(PyExc_ValueError);
    if (!value_error && !e.matches(PyExc_TypeError)) throw;
    const std::string message = fmt::format(
        "distribute_tensor: the {} passed as `tensor` does not convert to a numpy array: {} "
        "(expected a numpy array, an array-like of uniform shape such as nested lists of equal "
        "lengths, or an Array)",
        type_name(x), py::str(e.value()).cast<std::string>());
    py::raise_from(e, value_error ? PyExc_ValueError : PyExc_TypeError, message.c_str());
    throw py::error_already_set();
  }
}

// The DType of the converted input; ValueError naming what was passed when it has none.
DType input_dtype(const py::object& x, const py::array& arr) {
  try {
    return dtype_from_numpy(arr.dtype());
  } catch (const ValueError& e) {
    throw ValueError(fmt::format(
        "distribute_tensor: the {} passed as `tensor` has no meshlayout dtype: {} (expected a "
        "numpy array or array-like of numbers or bools, or an Array)",
        type_name(x), e.what()));
  }
}

// distribute_tensor(numpy, layout): each local device copies its box straight from the numpy
// buffer (as distribute_tensor(HostTensor) does, without first copying into a HostTensor).
// Only C++ runs while the GIL is released: `x` outlives the call (the caller holds it).
Array distribute_numpy(const py::array& x, DType dtype, const TensorLayout& layout) {
  const Shape shape(x.shape(), x.shape() + x.ndim());
  const auto* src = static_cast<const std::byte*>(x.data());
  py::gil_scoped_release release;
  Array a = Array::allocate(layout, shape, dtype);
  const Box whole_box{Shape(shape.size(), 0), shape};
  const size_t elem = dtype_size(dtype);
  a.runtime().pool().parallel_for(a.local_shards().size(), [&](size_t i) {
    Array::Shard& s = a.local_shards()[i];
    copy_box(src, whole_box, s.buffer.data(), s.box, s.box, elem);
  });
  return a;
}

// The result is computed with the GIL released and becomes a Python object only once the GIL
// is held again (issue 24: casting without it crashed threads resharding at once).
py::object distribute(const py::object& x, const TensorLayout& layout) {
  // A copy: the Python TensorLayout may gain a mesh from another thread while this one works.
  const TensorLayout target = layout;
  std::shared_ptr<Array> out;
  if (py::isinstance<Array>(x)) {
    const Array& src = x.cast<const Array&>();  // x (the caller's) keeps it alive
    py::gil_scoped_release release;
    out = std::make_shared<Array>(distribute_tensor(src, target));
  } else {
    py::array arr = to_numpy(x);
    const DType dtype = input_dtype(x, arr);
    out = std::make_shared<Array>(distribute_numpy(arr, dtype, target));
  }
  return py::cast(std::move(out));
}

py::list shards_of(const py::object& self) {
  const Array& a = self.cast<const Array&>();
  py::list out;
  for (const Array::Shard& s : a.local_shards()) {
    py::tuple index(s.box.shape.size());
    for (size_t d = 0; d < s.box.shape.size(); ++d) {
      index[d] = py::slice(s.box.offset[d], s.box.offset[d] + s.box.shape[d], 1);
    }
    out.append(PyShard{device_name(s.device_id), index,
                       view(a.dtype(), s.box.shape, s.buffer.data(), self)});
  }
  return out;
}

}  // namespace

py::object array_to_python(Array array) {
  return py::cast(std::make_shared<Array>(std::move(array)));
}

void bind_array(py::module_& m) {
  py::class_<PyShard>(m, "Shard")
      .def_readonly("device", &PyShard::device)
      .def_readonly("index", &PyShard::index)
      .def_readonly("data", &PyShard::data)
      .def("__repr__", [](const PyShard& s) {
        return fmt::format("<Shard device={} index={}>", s.device, std::string(py::repr(s.index)));
      });

  py::class_<Array, ArrayPtr>(m, "Array")
      .def_property_readonly("shape", [](const Array& a) { return py::tuple(py::cast(a.shape())); })
      .def_property_readonly("dtype", [](const Array& a) { return python_dtype_name(a.dtype()); })
      .def_property_readonly("layout", [](const Array& a) { return a.layout(); })
      .def_property_readonly("nbytes",
                             [](const Array& a) {
                               return num_elements(a.shape()) *
                                      static_cast<int64_t>(dtype_size(a.dtype()));
                             })
      .def_property_readonly("addressable_shards", &shards_of,
                             "One Shard per local device: .device, .index (slices), .data "
                             "(read-only numpy view, no copy).")
      .def(
          "__array__",
          [](const Array& a, const py::object& dtype) {
            HostTensor t;
            {
              py::gil_scoped_release release;
              t = a.gather();
            }
            py::array out = host_to_numpy(std::move(t));
            return dtype.is_none() ? out : py::array(out.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def("__repr__", [](const Array& a) {
        return fmt::format("<Array shape={} dtype={} layout={}>", shape_to_string(a.shape()),
                           python_dtype_name(a.dtype()), a.layout().to_string());
      });

  m.def("distribute_tensor", &distribute, py::arg("tensor"), py::arg("layout"),
        "A numpy array (or array-like) or an Array → an Array under `layout` (Keras' "
        "distribute_tensor); from an Array this reshards, moving the least data.");

  m.def(
      "device_memory",
      []() {
        py::dict out;
        for (VirtualDevice* d : default_runtime()->local_devices()) {
          MemoryStats s = d->memory().stats();
          py::dict e;
          e["bytes_live"] = s.bytes_live;
          e["peak_bytes"] = s.peak_bytes;
          out[py::str(d->name())] = e;
        }
        return out;
      },
      "Bytes live and peak per local device of the default runtime.");
}

}  // namespace meshlayout::python
