// bind_distribution.cc — the C++ side of meshlayout.distribution (python/meshlayout/
// distribution.py): DataParallel and ModelParallel as C++ distributions (nn/distribution.h),
// and the thread's current one as C++ sees it. The Python classes keep Keras' objects and
// identities (a lookup returns the TensorLayout stored in the LayoutMap); each holds one of these
// for what C++ decides (replica and data-shard arithmetic, models built under it).
//
// Example (distribution.py):
//   cpp = _model_parallel(layout_map, "batch", True)   # ValueError for an unknown batch axis
//   _set_thread_distribution(cpp)                       # C++'s distribution() on this thread
//   _set_thread_distribution(None)                      # back to what it was before
#include <fmt/format.h>
#include <pybind11/stl.h>

#ifndef MESHLAYOUT_PYTHON_MPI  // python/CMakeLists.txt: 1 when built with MPI
#define MESHLAYOUT_PYTHON_MPI 0
#endif
#if MESHLAYOUT_PYTHON_MPI
#include <dlfcn.h>
#include <mpi.h>
#endif

#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/runtime/runtime.h"
#if MESHLAYOUT_PYTHON_MPI
#include "meshlayout/runtime/mpi/initialize.h"
#endif

namespace meshlayout::python {
namespace {

// The distribution Python made current on this thread (set_distribution or a scope): one
// DistributionScope, rebuilt on every change, so C++'s distribution() follows Python's
// thread-local one. It owns only C++ objects, so it may be destroyed at thread exit without
// the GIL.
thread_local std::optional<DistributionScope> t_python_scope;

const char* kind_of(const Distribution& d) {
  return dynamic_cast<const ModelParallel*>(&d) != nullptr ? "ModelParallel" : "DataParallel";
}

#if MESHLAYOUT_PYTHON_MPI
// Open MPI loads its components with dlopen and they look for libmpi's symbols globally;
// Python loaded this module (and libmpi with it) privately (RTLD_LOCAL). Promote libmpi to
// RTLD_GLOBAL before MPI_Init, as mpi4py does.
void make_libmpi_global() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) != 0 && info.dli_fname != nullptr) {
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  }
}
#endif

// keras.distribution.initialize: under mpirun, MPI and the runtime of every process
// (initialize.h); in one process started otherwise, nothing, after checking the arguments.
void initialize_processes(std::optional<int> num_processes, std::optional<int> process_id) {
#if MESHLAYOUT_PYTHON_MPI
  if (launched_by_mpirun()) {
    make_libmpi_global();
    py::gil_scoped_release release;  // collective: other processes may take a while
    initialize(nullptr, nullptr, {.num_processes = num_processes, .process_id = process_id});
    return;
  }
#endif
  if (num_processes && *num_processes != 1) {
    throw ValueError(fmt::format(
        "initialize: num_processes={} but this process was not started by mpirun{}: meshlayout's "
        "processes are an mpirun launch (mpirun -np {} python3 ...)",
        *num_processes, MESHLAYOUT_PYTHON_MPI ? "" : " (and this module was built without MPI)",
        *num_processes));
  }
  if (process_id && *process_id != 0) {
    throw ValueError(fmt::format(
        "initialize: process_id={} but this is the only process (not started by mpirun); "
        "expected 0 or None",
        *process_id));
  }
}

}  // namespace

void bind_distribution(py::module_& m) {
  py::class_<Distribution, std::shared_ptr<Distribution>>(m, "_CppDistribution")
      .def_property_readonly("kind", &kind_of)
      .def_property_readonly("device_mesh", &Distribution::device_mesh)
      .def_property_readonly("batch_dim_name", &Distribution::batch_dim_name)
      .def_property("auto_shard_dataset", &Distribution::auto_shard_dataset,
                    &Distribution::set_auto_shard_dataset)
      .def_property_readonly("process_id", &Distribution::process_id)
      .def_property_readonly("num_processes", &Distribution::num_processes)
      .def_property_readonly("num_model_replicas", &Distribution::num_model_replicas)
      .def_property_readonly("num_data_shards", &Distribution::num_data_shards)
      .def_property_readonly("data_shard_id", &Distribution::data_shard_id)
      .def("get_data_layout", &Distribution::get_data_layout, py::arg("data_shape"))
      .def("get_tensor_layout", &Distribution::get_tensor_layout, py::arg("path"))
      .def(
          "process_batch_rows",
          [](const Distribution& d, int64_t global_batch_size) {
            const RowRange r = d.process_batch_rows(global_batch_size);
            return py::make_tuple(r.begin, r.end);
          },
          py::arg("global_batch_size"),
          "[begin, end) of a global batch that this process feeds (Keras' data sharding).")
      .def("__repr__", [](const Distribution& d) {
        return fmt::format("<_CppDistribution {} mesh={} batch_dim_name={}>", kind_of(d),
                           d.device_mesh().to_string(), d.batch_dim_name());
      });

  m.def(
      "_data_parallel",
      [](const DeviceMesh& mesh, bool auto_shard_dataset) -> std::shared_ptr<Distribution> {
        return std::make_shared<DataParallel>(mesh, std::nullopt, auto_shard_dataset);
      },
      py::arg("device_mesh"), py::arg("auto_shard_dataset"));
  m.def(
      "_model_parallel",
      [](const py::handle& layout_map, const std::optional<std::string>& batch_dim_name,
         bool auto_shard_dataset) -> std::shared_ptr<Distribution> {
        return std::make_shared<ModelParallel>(layout_map_of(layout_map), batch_dim_name,
                                               auto_shard_dataset);
      },
      py::arg("layout_map"), py::arg("batch_dim_name"), py::arg("auto_shard_dataset"),
      "A C++ ModelParallel over a copy of the Python LayoutMap's rules (as they are now).");
  m.def(
      "_set_thread_distribution",
      [](std::shared_ptr<Distribution> d) {
        // C++'s own thread-local current distribution is touched first, so it is constructed
        // before t_python_scope and destroyed after it at thread exit: t_python_scope's
        // DistributionScope restores it while it still exists.
        (void)distribution();
        t_python_scope.reset();  // back to what C++ had before Python's first change
        if (d) t_python_scope.emplace(std::move(d));
      },
      py::arg("distribution").none(true),
      "Makes `distribution` (None: none) C++'s current one on this thread.");
  m.def("_initialize", &initialize_processes, py::arg("num_processes").none(true),
        py::arg("process_id").none(true));
  m.def("_process_count", []() { return num_processes(); });
  m.def("_process_index", []() { return process_id(); });
  m.def(
      "_current_cpp_distribution",
      []() { return std::const_pointer_cast<Distribution>(distribution()); },
      "C++'s distribution() on this thread (a scope, else the global one), or None.");
}

}  // namespace meshlayout::python
