// bind_train.cc — training from Python (issue 29 item 2): optimizers (the C++ registry by
// Keras name with Keras' arguments), the losses' names, a compiled model's fit / evaluate /
// predict on numpy arrays through the C++ Trainer (the same steps as a C++ fit: bit for bit),
// Python callbacks called from C++ with the GIL held only while they run, the compiled
// metrics fed each step's outputs (BatchLogs::y_pred), Ctrl-C between
// batches (KeyboardInterrupt, the model left usable), Keras' progress lines on sys.stdout, and
// save_weights / load_weights (nn/model_checkpoint.h). The GIL is released while C++ computes.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "meshlayout/core/strings.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/nn/model_checkpoint.h"
#include "meshlayout/train/losses.h"
#include "meshlayout/train/optimizer.h"
#include "meshlayout/train/trainer.h"
#include "nn_bindings.h"

namespace meshlayout::python {
namespace {

// Writes to Python's sys.stdout (taking the GIL) at each line end or '\r', as Keras prints.
class PythonStdoutBuf : public std::streambuf {
 protected:
  int overflow(int c) override {
    if (c == EOF) return 0;
    buffer_.push_back(static_cast<char>(c));
    if (c == '\n' || c == '\r') sync();
    return c;
  }
  int sync() override {
    if (buffer_.empty()) return 0;
    py::gil_scoped_acquire gil;
    py::object out = py::module_::import("sys").attr("stdout");
    out.attr("write")(buffer_);
    out.attr("flush")();
    buffer_.clear();
    return 0;
  }

 private:
  std::string buffer_;
};

// Thrown from a callback to leave fit early: a Python exception (stored) or stop_training.
struct LeaveFit {};

// Python callbacks, validation and Ctrl-C inside the C++ fit loop.
class PyCallbacks : public Callback {
 public:
  // metrics: None, or an object whose batch(index, loss, y_true, y_pred) takes each step's
  // targets and outputs as numpy arrays and returns the logs to add (the metrics' running means).
  PyCallbacks(py::list callbacks, py::object model, const HostTensor* x_val,
              const HostTensor* y_val, int64_t batch_size, py::object metrics)
      : callbacks_(std::move(callbacks)),
        model_(std::move(model)),
        metrics_(std::move(metrics)),
        x_val_(x_val),
        y_val_(y_val),
        batch_size_(batch_size) {
    // keras.callbacks.Callback's own on_train_batch_end does nothing: a callback that keeps it
    // (History, BackupAndRestore, …) costs no Python call per step.
    const py::object base =
        py::module_::import("meshlayout.callbacks").attr("Callback").attr("on_train_batch_end");
    for (const py::handle& cb : callbacks_) {
      if (!py::hasattr(cb, "on_train_batch_end")) continue;
      const py::object own = py::getattr(py::type::of(cb), "on_train_batch_end", py::none());
      const bool on_instance = py::hasattr(cb, "__dict__") &&
                               cb.attr("__dict__").contains("on_train_batch_end");  // Lambda…
      batch_hooks_ |= !own.is(base) || on_instance;
    }
  }

  void on_train_begin(Trainer&) override { call_each("on_train_begin", {}); }

  void on_train_batch_end(Trainer&, const BatchLogs& logs) override {
    std::optional<HostTensor> y_true, y_pred;
    if (!metrics_.is_none() && logs.y_pred != nullptr) {  // gathered without the GIL
      y_pred = logs.y_pred->gather();
      y_true = logs.y_true->gather();
    }
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) stash();  // Ctrl-C: KeyboardInterrupt between batches
    py::dict d;
    d["loss"] = logs.loss;
    if (y_pred) {
      try {
        d.attr("update")(metrics_.attr("batch")(logs.batch, logs.loss,
                                                numpy_from_host(std::move(*y_true)),
                                                numpy_from_host(std::move(*y_pred))));
      } catch (py::error_already_set& e) {
        error.emplace(std::move(e));
        throw LeaveFit{};
      }
    }
    if (!batch_hooks_) return;
    invoke("on_train_batch_end", py::int_(logs.batch), d);
  }

  void on_epoch_end(Trainer& trainer, int64_t epoch, double loss) override {
    std::optional<double> val_loss;
    if (x_val_) val_loss = trainer.evaluate(*x_val_, *y_val_, {.batch_size = batch_size_});
    py::gil_scoped_acquire gil;
    losses.push_back(loss);
    py::dict d;
    d["loss"] = loss;
    if (val_loss) {
      val_losses.push_back(*val_loss);
      d["val_loss"] = *val_loss;
    }
    invoke("on_epoch_end", py::int_(epoch), d);
    if (py::hasattr(model_, "stop_training") && model_.attr("stop_training").cast<bool>()) {
      stopped = true;
      throw LeaveFit{};
    }
  }

  void on_train_end(Trainer&) override { call_each("on_train_end", {}); }

  std::vector<double> losses, val_losses;
  bool stopped = false;
  std::optional<py::error_already_set> error;

 private:
  void call_each(const char* hook, std::optional<int64_t> index) {
    py::gil_scoped_acquire gil;
    invoke(hook, index ? py::object(py::int_(*index)) : py::object(), py::dict());
  }

  // Calls hook(index, logs) (or hook(logs)) on every callback that has it; a Python error is
  // kept and ends fit.
  void invoke(const char* hook, const py::object& index, const py::dict& logs) {
    for (const py::handle& cb : callbacks_) {
      if (!py::hasattr(cb, hook)) continue;
      try {
        if (index) {
          cb.attr(hook)(index, logs);
        } else {
          cb.attr(hook)(logs);
        }
      } catch (py::error_already_set& e) {
        error.emplace(std::move(e));
        throw LeaveFit{};
      }
    }
  }

  void stash() {
    error.emplace();  // fetches the pending KeyboardInterrupt
    throw LeaveFit{};
  }

  py::list callbacks_;
  py::object model_;
  py::object metrics_;
  const HostTensor* x_val_;
  const HostTensor* y_val_;
  int64_t batch_size_;
  bool batch_hooks_ = false;  // some callback has on_train_batch_end
};

struct PyTrainer {
  std::shared_ptr<Model> model;
  std::unique_ptr<Trainer> trainer;
};

std::unique_ptr<PyTrainer> compile_model(const std::shared_ptr<Model>& model,
                                         const std::shared_ptr<Optimizer>& optimizer,
                                         const std::string& loss, bool from_logits,
                                         double label_smoothing) {
  auto out = std::make_unique<PyTrainer>();
  out->model = model;
  CompileOptions options{
      .optimizer_instance = optimizer,
      .loss = loss,
      .loss_options = {.from_logits = from_logits, .label_smoothing = label_smoothing}};
  out->trainer = std::make_unique<Trainer>(model, std::move(options));
  return out;
}

py::dict fit(PyTrainer& self, const py::object& model, const py::object& x, const py::object& y,
             int64_t batch_size, int64_t epochs, bool shuffle, uint64_t seed, int verbose,
             const py::list& callbacks, const py::object& validation, int64_t initial_epoch,
             int64_t steps_per_epoch, const py::object& metrics) {
  const HostTensor hx = host_from_numpy(x, "x");
  const HostTensor hy = host_from_numpy(y, "y");
  std::optional<HostTensor> xv, yv;
  if (!validation.is_none()) {
    xv = host_from_numpy(validation[py::int_(0)], "validation_data's x");
    yv = host_from_numpy(validation[py::int_(1)], "validation_data's y");
  }
  PythonStdoutBuf buf;
  std::ostream out(&buf);
  auto hooks = std::make_shared<PyCallbacks>(callbacks, model, xv ? &*xv : nullptr,
                                             yv ? &*yv : nullptr, batch_size, metrics);
  FitOptions options{.batch_size = batch_size,
                     .epochs = epochs,
                     .shuffle = shuffle,
                     .shuffle_seed = seed,
                     .verbose = verbose,
                     .out = &out,
                     .steps_per_epoch = steps_per_epoch,
                     .initial_epoch = initial_epoch,
                     .callbacks = {hooks}};
  {
    py::gil_scoped_release release;
    try {
      (void)self.trainer->fit(hx, hy, options);
    } catch (const LeaveFit&) {
      self.model->set_training(false);
      out.flush();
    }
  }
  if (hooks->error) {
    hooks->error->restore();
    throw py::error_already_set();
  }
  if (hooks->stopped) {
    py::gil_scoped_release release;
    hooks->on_train_end(*self.trainer);
  }
  py::dict history;
  history["loss"] = hooks->losses;
  if (xv) history["val_loss"] = hooks->val_losses;
  return history;
}

double evaluate(PyTrainer& self, const py::object& x, const py::object& y, int64_t batch_size,
                int verbose) {
  const HostTensor hx = host_from_numpy(x, "x");
  const HostTensor hy = host_from_numpy(y, "y");
  PythonStdoutBuf buf;
  std::ostream out(&buf);
  py::gil_scoped_release release;
  return self.trainer->evaluate(hx, hy,
                                {.batch_size = batch_size, .verbose = verbose, .out = &out});
}

py::array predict(PyTrainer& self, const py::object& x, int64_t batch_size) {
  const HostTensor hx = host_from_numpy(x, "x");
  HostTensor out;
  {
    py::gil_scoped_release release;
    out = self.trainer->predict(hx, {.batch_size = batch_size});
  }
  return numpy_from_host(std::move(out));
}

// A number argument of an optimizer (int, float, numpy number; not a bool or a string).
double number(const py::handle& value, const std::string& key) {
  if (py::isinstance<py::bool_>(value) || !py::hasattr(value, "__float__")) {
    throw py::type_error(fmt::format("optimizer argument {} must be a number, got {}", key,
                                     std::string(py::repr(value))));
  }
  return py::float_(py::reinterpret_borrow<py::object>(value)).cast<double>();
}

bool flag(const py::handle& value, const std::string& key) {
  if (!py::isinstance<py::bool_>(value)) {
    throw py::type_error(fmt::format("optimizer argument {} must be a bool, got {}", key,
                                     std::string(py::repr(value))));
  }
  return value.cast<bool>();
}

OptimizerOptions optimizer_options(const py::dict& kwargs) {
  OptimizerOptions o;
  for (const auto& [key_handle, value] : kwargs) {
    const std::string key = py::str(key_handle);
    if (value.is_none()) continue;
    if (key == "name") {
      if (!py::isinstance<py::str>(value)) {
        throw py::type_error(
            fmt::format("optimizer name must be a string, got {}", std::string(py::repr(value))));
      }
      o.name = value.cast<std::string>();
      continue;
    }
    if (key == "nesterov" || key == "amsgrad") {
      (key == "nesterov" ? o.nesterov : o.amsgrad) = flag(value, key);
      continue;
    }
    if (py::isinstance<py::bool_>(value)) {
      o.arguments[key] = value.cast<bool>();
      continue;
    }
    const double v = number(value, key);
    if (key == "learning_rate") {
      o.learning_rate = v;
    } else if (key == "weight_decay") {
      o.weight_decay = v;
    } else if (key == "clipnorm") {
      o.clipnorm = v;
    } else if (key == "clipvalue") {
      o.clipvalue = v;
    } else if (key == "global_clipnorm") {
      o.global_clipnorm = v;
    } else if (key == "momentum") {
      o.momentum = v;
    } else if (key == "beta_1") {
      o.beta_1 = v;
    } else if (key == "beta_2") {
      o.beta_2 = v;
    } else if (key == "epsilon") {
      o.epsilon = v;
    } else {
      o.arguments[key] = v;
    }
  }
  return o;
}

}  // namespace

void bind_train(py::module_& m) {
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "_Optimizer")
      .def_property_readonly("name", &Optimizer::name)
      .def_property("learning_rate", &Optimizer::learning_rate, &Optimizer::set_learning_rate)
      .def_property_readonly("iterations", &Optimizer::iterations)
      .def_property_readonly("variables", &Optimizer::variables);
  m.def(
      "_make_optimizer",
      [](const std::string& name, const py::dict& kwargs) {
        return std::shared_ptr<Optimizer>(make_optimizer(name, optimizer_options(kwargs)));
      },
      py::arg("name"), py::arg("kwargs"));
  m.def("_optimizer_names", &optimizer_names);
  m.def("_loss_names", &loss_names);
  m.def(
      "_check_loss",
      [](const std::string& name, bool from_logits, double label_smoothing) {
        return make_loss(name, {.from_logits = from_logits, .label_smoothing = label_smoothing})
            ->name();
      },
      py::arg("name"), py::arg("from_logits"), py::arg("label_smoothing"));

  py::class_<PyTrainer>(m, "_Trainer")
      .def(py::init(&compile_model), py::arg("model"), py::arg("optimizer"), py::arg("loss"),
           py::arg("from_logits"), py::arg("label_smoothing"))
      .def("fit", &fit, py::arg("model"), py::arg("x"), py::arg("y"), py::arg("batch_size"),
           py::arg("epochs"), py::arg("shuffle"), py::arg("seed"), py::arg("verbose"),
           py::arg("callbacks"), py::arg("validation"), py::arg("initial_epoch") = 0,
           py::arg("steps_per_epoch") = 0, py::arg("metrics") = py::none())
      .def("evaluate", &evaluate, py::arg("x"), py::arg("y"), py::arg("batch_size"),
           py::arg("verbose"))
      .def("predict", &predict, py::arg("x"), py::arg("batch_size"));

  m.def(
      "_save_weights",
      [](const Model& model, const std::string& path, bool keras3_paths) {
        io_call([&] {
          py::gil_scoped_release release;
          (void)save_model(model, path,
                           {.path_style = keras3_paths ? VariablePathStyle::kScope
                                                       : VariablePathStyle::kObject});
        });
      },
      py::arg("model"), py::arg("path"), py::arg("keras3_paths"));
  m.def(
      "_load_weights",
      [](Model& model, const std::string& path, bool keras3_paths, bool skip_mismatch) {
        return io_call([&] {
          py::gil_scoped_release release;
          const Checkpoint checkpoint = Checkpoint::open(path);
          ModelLoadReport r = load_model(
              model, checkpoint,
              {.path_style = keras3_paths ? VariablePathStyle::kScope : VariablePathStyle::kObject,
               .allow_missing = skip_mismatch,
               .allow_unexpected = skip_mismatch});
          return r.loaded;
        });
      },
      py::arg("model"), py::arg("path"), py::arg("keras3_paths"), py::arg("skip_mismatch"));
}

}  // namespace meshlayout::python
