// bind_io.cc — safetensors checkpoints from Python: open_checkpoint(path) (a file, an index or a
// directory), Checkpoint.inspect(), plan(checkpoint, layout_map) (what `meshlayout plan
// --json` prints, as a dict), load(checkpoint, layouts) into Arrays, save(path, arrays).
// I/O failures are OSError, a missing tensor is KeyError, a bad shape or dtype ValueError.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "meshlayout/core/byte_size.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/plan/checkpoint_plan.h"
#include "meshlayout/plan/memory_plan.h"
#include "meshlayout/plan/plan_render.h"

namespace meshlayout::python {
namespace {

using CheckpointPtr = std::shared_ptr<Checkpoint>;

py::list inspect(const Checkpoint& ckpt) {
  py::list out;
  for (const auto& [file, info] : ckpt.tensors()) {
    py::dict t;
    t["name"] = info->name;
    t["dtype"] = info->dtype_name;
    t["shape"] = py::tuple(py::cast(info->shape));
    t["bytes"] = info->num_bytes();
    t["data_offsets"] = py::make_tuple(info->begin, info->end);
    t["file"] = file->path();
    out.append(t);
  }
  return out;
}

// The layout each named tensor loads with: from a dict {name: TensorLayout}, or from a
// LayoutMap for every tensor of the checkpoint (no rule: replicated on the map's mesh).
std::vector<std::pair<std::string, TensorLayout>> layouts_for(const Checkpoint& ckpt,
                                                              const py::object& layouts) {
  std::vector<std::pair<std::string, TensorLayout>> out;
  if (py::isinstance<py::dict>(layouts)) {
    for (auto [name, layout] : layouts.cast<py::dict>()) {
      out.emplace_back(name.cast<std::string>(), layout.cast<TensorLayout>());
    }
    return out;
  }
  const LayoutMap& map = layout_map_of(layouts);
  if (!map.device_mesh()) {
    throw ValueError(
        "load(checkpoint, layout_map): the LayoutMap has no device_mesh, so "
        "tensors no rule matches have no mesh to be replicated on");
  }
  for (const auto& [file, info] : ckpt.tensors()) {
    std::optional<TensorLayout> l = map.get(info->name);
    out.emplace_back(
        info->name,
        l ? *l : TensorLayout::replicated(static_cast<int>(info->shape.size()), map.device_mesh()));
  }
  return out;
}

py::dict load(const Checkpoint& ckpt, const py::object& layouts, bool convert_dtypes,
              const py::object& dtype) {
  std::vector<std::pair<std::string, TensorLayout>> wanted = layouts_for(ckpt, layouts);
  std::optional<DType> as;
  if (!dtype.is_none()) as = parse_dtype(py::str(dtype).cast<std::string>());
  std::vector<Array> arrays;
  std::vector<LoadTarget> targets;
  arrays.reserve(wanted.size());
  {
    io_call(
        [&] {
          py::gil_scoped_release release;  // inside: io_call raises Python errors with the GIL held
          for (const auto& [name, layout] : wanted) {
            auto [file, info] = ckpt.find(name);
            if (info == nullptr) {
              throw NotFoundError(
                  fmt::format("checkpoint '{}' has no tensor '{}'", ckpt.path(), name));
            }
            if (!info->dtype) {
              throw ValueError(fmt::format("tensor '{}' has dtype {}, which meshlayout cannot load",
                                           name, info->dtype_name));
            }
            arrays.push_back(Array::allocate(layout, info->shape, as.value_or(*info->dtype)));
            targets.push_back(LoadTarget{name, &arrays.back()});
          }
          load_arrays(ckpt, targets,
                      LoadOptions{.convert_dtypes = convert_dtypes || as.has_value()});
          return 0;
        },
        /*missing_is_key=*/true);
  }
  py::dict out;
  for (size_t i = 0; i < arrays.size(); ++i)
    out[py::str(wanted[i].first)] = array_to_python(std::move(arrays[i]));
  return out;
}

py::dict save(const std::string& path, const py::dict& arrays,
              const std::map<std::string, std::string>& metadata) {
  std::vector<NamedArray> named;
  // The Arrays stay alive while the GIL is released: another thread may empty `arrays`. The
  // references are dropped at the end, with the GIL held again.
  std::vector<py::object> keep_alive;
  for (auto [name, array] : arrays) {
    keep_alive.push_back(py::reinterpret_borrow<py::object>(array));
    named.push_back(NamedArray{name.cast<std::string>(), &array.cast<const Array&>()});
  }
  SaveReport r;
  r = io_call([&] {
    py::gil_scoped_release release;
    return save_arrays(path, named, SaveOptions{.metadata = metadata});
  });
  py::dict out;
  out["file_bytes"] = r.file_bytes;
  out["bytes_written"] = r.bytes_written;
  return out;
}

}  // namespace

void bind_io(py::module_& m) {
  py::class_<Checkpoint, CheckpointPtr>(m, "Checkpoint")
      .def_property_readonly("path", &Checkpoint::path)
      .def_property_readonly("metadata", &Checkpoint::metadata)
      .def_property_readonly("file_bytes", &Checkpoint::file_bytes)
      .def_property_readonly("files",
                             [](const Checkpoint& c) {
                               std::vector<std::string> out;
                               for (const auto& f : c.files()) out.push_back(f->path());
                               return out;
                             })
      .def("keys",
           [](const Checkpoint& c) {
             std::vector<std::string> out;
             for (const auto& t : c.tensors()) out.push_back(t.second->name);
             return out;
           })
      .def("__len__", [](const Checkpoint& c) { return c.tensors().size(); })
      .def("__contains__",
           [](const Checkpoint& c, std::string_view n) { return c.find(n).second != nullptr; })
      .def("inspect", &inspect,
           "One dict per tensor: name, dtype, shape, bytes, data_offsets, file.")
      .def("__repr__", [](const Checkpoint& c) {
        return fmt::format("<Checkpoint '{}': {} tensors in {} files>", c.path(),
                           c.tensors().size(), c.files().size());
      });

  m.def(
      "open_checkpoint",
      [](const std::string& path) {
        return io_call([&] { return std::make_shared<Checkpoint>(Checkpoint::open(path)); });
      },
      py::arg("path"),
      "A .safetensors file, a *.safetensors.index.json, or a directory with either.");

  m.def(
      "_plan_json",
      [](const Checkpoint& ckpt, const py::object& layout_map, bool strict) {
        CheckpointPlan plan = plan_checkpoint(ckpt, layout_map_of(layout_map),
                                              PlanOptions{.strict = strict}, ckpt.path());
        return render_plan_json(plan);
      },
      py::arg("checkpoint"), py::arg("layout_map"), py::arg("strict") = false);

  // `meshlayout plan DIR --optimizer … --batch … --json`'s "memory" (plan/memory_plan.h).
  m.def(
      "_memory_plan_json",
      [](const std::string& directory, const py::object& layout_map,
         const std::optional<std::string>& optimizer, bool zero1, int64_t batch, int64_t seq,
         int64_t cache_length, const std::string& recompute,
         const std::optional<std::string>& device_memory) {
        const LayoutMap& map = layout_map_of(layout_map);
        const Recompute r = parse_recompute(recompute);
        std::optional<uint64_t> memory;
        if (device_memory) memory = parse_byte_count(*device_memory, "device_memory");
        return io_call([&] {
          const HfLlamaCheckpoint llama = HfLlamaCheckpoint::open(directory);
          const std::vector<TensorInfo> infos = keras_variable_infos(llama);
          std::vector<const TensorInfo*> pointers;
          for (const TensorInfo& t : infos) pointers.push_back(&t);
          const CheckpointPlan plan = plan_tensors(pointers, map);
          std::unique_ptr<Optimizer> opt;
          if (optimizer) {
            OptimizerOptions o{.name = stable_optimizer_name(*optimizer)};
            if (zero1) o.shard_slots_over = plan.mesh.axis_names().front();
            opt = make_optimizer(*optimizer, o);
          }
          const MemoryPlan m = plan_memory(plan, map,
                                           {.optimizer = opt.get(),
                                            .batch = batch,
                                            .seq = seq,
                                            .cache_length = cache_length,
                                            .recompute = r,
                                            .shapes = decoder_shapes(llama.config()),
                                            .device_memory = memory});
          return memory_json(m, plan.mesh).dump();
        });
      },
      py::arg("directory"), py::arg("layout_map"), py::arg("optimizer"), py::arg("zero1"),
      py::arg("batch"), py::arg("seq"), py::arg("cache_length"), py::arg("recompute"),
      py::arg("device_memory"));

  m.def("load", &load, py::arg("checkpoint"), py::arg("layouts"), py::arg("convert_dtypes") = false,
        py::arg("dtype") = py::none(),
        "Arrays from a checkpoint: `layouts` is {name: TensorLayout} or a LayoutMap (every "
        "tensor; unmatched ones replicated). Each process reads only its shards' bytes.");
  m.def("save", &save, py::arg("path"), py::arg("arrays"),
        py::arg("metadata") = std::map<std::string, std::string>{},
        "Writes {name: Array} as one safetensors file, atomically.");
}

}  // namespace meshlayout::python
