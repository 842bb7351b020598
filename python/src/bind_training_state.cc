// bind_training_state.cc — training-state checkpoints from Python (issue 29 item 2): a compiled
// model's weights (model.safetensors, Keras 3 paths) and its optimizer's state
// (optimizer.safetensors: slots and iterations) saved together and atomically into one directory
// (train/training_state.h, the marker recording the epochs fit has finished), and loaded back
// into any mesh; the newest complete state under a root (BackupAndRestore's backup_dir).
//
//   _save_training_state(model, optimizer, "ckpt/step-00000012", epoch=3)
//   _load_training_state(model, optimizer, "ckpt/step-00000012")   # {"iterations": 12, "epoch": 3}
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "meshlayout/io/array_io.h"
#include "meshlayout/io/save_directory.h"
#include "meshlayout/nn/model_checkpoint.h"
#include "meshlayout/train/training_state.h"
#include "nn_bindings.h"

namespace meshlayout::python {
namespace {

constexpr const char* kModelStateFile = "model.safetensors";

std::vector<VariablePtr> trainable_of(const Model& model) {
  std::vector<VariablePtr> out;
  for (const VariablePtr& v : model.variables()) {
    if (v->trainable()) out.push_back(v);
  }
  return out;
}

void save_state(const Model& model, Optimizer& optimizer, const std::string& dir, int64_t epoch) {
  if (!model.built()) {
    throw ValueError(fmt::format(
        "save_training_state: model {} is not built yet (call it or fit it first)", model.name()));
  }
  io_call([&] {
    py::gil_scoped_release release;
    optimizer.build(trainable_of(model));  // a model not trained yet: its slots, zero
    const ModelFiles files{.names = {kModelStateFile}, .write = [&](const std::string& d) {
                             (void)save_model(model, d + "/" + kModelStateFile,
                                              {.path_style = VariablePathStyle::kScope});
                           }};
    save_training_state(dir, files, optimizer, {.iterations = optimizer.iterations()},
                        {{"epoch", epoch}});
  });
}

py::dict load_state(Model& model, Optimizer& optimizer, const std::string& dir) {
  int64_t iterations = 0, epoch = 0;
  io_call([&] {
    py::gil_scoped_release release;
    check_save_complete(dir, std::vector<std::string>{kModelStateFile, kOptimizerStateFile});
    const Checkpoint weights = Checkpoint::open(dir + "/" + kModelStateFile);
    (void)load_model(model, weights, {.path_style = VariablePathStyle::kScope});
    const std::optional<TrainingPosition> position =
        resume_training_state(dir, optimizer, trainable_of(model));
    if (!position) {
      throw ValueError(fmt::format("{} holds no optimizer state ({}): not a training state", dir,
                                   kOptimizerStateFile));
    }
    iterations = position->iterations;
    const nlohmann::json marker = read_save_marker(dir);
    if (marker.is_object() && marker.contains("epoch") && marker["epoch"].is_number_integer()) {
      epoch = marker["epoch"].get<int64_t>();
    }
  });
  py::dict out;
  out["iterations"] = iterations;
  out["epoch"] = epoch;
  return out;
}

}  // namespace

void bind_training_state(py::module_& m) {
  m.def("_save_training_state", &save_state, py::arg("model"), py::arg("optimizer"),
        py::arg("directory"), py::arg("epoch"));
  m.def("_load_training_state", &load_state, py::arg("model"), py::arg("optimizer"),
        py::arg("directory"));
  m.def(
      "_latest_training_state",
      [](const std::string& root) {
        py::gil_scoped_release release;
        return TrainingCheckpoint::latest(root);
      },
      py::arg("root"));
}

}  // namespace meshlayout::python
