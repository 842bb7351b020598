// bind_models.cc — the model families from Python (issue 29 item 1, the models part):
// ModelConfig (a Hugging Face config.json of every family LlamaConfig reads), CausalLM
// (LlamaModel: built sharded under a LayoutMap, loaded from a Hugging Face directory), its
// logits as numpy, generate (greedy or sampling, batched prompts of different lengths), train
// (meshlayout train's loop on numpy token rows, the CLI's losses bit for bit), and
// write_random_model (the demo's small random model, for tries and tests). The GIL is released
// while the model builds, loads and computes.
#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/models/random_llama.h"

namespace meshlayout::python {
namespace {

// A model built sharded and loaded from `directory`, with the config it was read from.
struct PyCausalLM {
  LlamaConfig config;
  std::string directory;
  std::unique_ptr<LlamaModel> model;
};

LlamaConfig config_from(const py::object& value) {
  if (py::isinstance<LlamaConfig>(value)) return value.cast<LlamaConfig>();
  if (py::isinstance<py::dict>(value)) {
    const std::string text = py::module_::import("json").attr("dumps")(value).cast<std::string>();
    return LlamaConfig::from_json(text, "the config dict");
  }
  throw py::type_error(
      fmt::format("a model config must be a ModelConfig or a dict of config.json fields, got {}",
                  py::str(py::type::of(value).attr("__name__")).cast<std::string>()));
}

// The rules as a LayoutMap: None → every variable replicated on one row of all devices
// (batch=1, model=N).
LayoutMap model_layouts(const py::object& rules, const char* what) {
  if (rules.is_none()) {
    return LayoutMap(
        DeviceMesh({1, static_cast<int64_t>(list_devices().size())}, {"batch", "model"}));
  }
  LayoutMap map = layout_map_of(rules);
  if (!map.device_mesh())
    throw ValueError(fmt::format("{}: the rules' LayoutMap has no device_mesh", what));
  return map;
}

DType compute_dtype(const std::string& dtype, const char* what) {
  if (dtype == "float32") return DType::kF32;
  if (dtype == "float64") return DType::kF64;
  throw ValueError(fmt::format("{}: dtype {} is not supported, expected 'float32' or 'float64'",
                               what, quote(dtype)));
}

// A model of `config` with freshly initialised weights (Keras' initializers, seeded as the C++
// LlamaModel seeds them), built sharded under `rules`.
std::unique_ptr<PyCausalLM> from_config(const py::object& config, const py::object& rules,
                                        const std::string& dtype) {
  auto out = std::make_unique<PyCausalLM>();
  out->config = config_from(config);
  const LayoutMap layouts = model_layouts(rules, "from_config");
  const DType compute = compute_dtype(dtype, "from_config");
  py::gil_scoped_release release;
  out->model = std::make_unique<LlamaModel>(out->config, layouts, LlamaOptions{.dtype = compute});
  return out;
}

std::unique_ptr<PyCausalLM> from_pretrained(const std::string& directory, const py::object& rules,
                                            const std::string& dtype) {
  const LayoutMap layouts = model_layouts(rules, "from_pretrained");
  const DType compute = compute_dtype(dtype, "from_pretrained");
  auto out = std::make_unique<PyCausalLM>();
  out->directory = directory;
  io_call([&] {
    py::gil_scoped_release release;
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(directory);
    out->config = checkpoint.config();
    out->model = std::make_unique<LlamaModel>(out->config, layouts, LlamaOptions{.dtype = compute});
    if (compute == DType::kF32) {
      (void)load_hf_llama(checkpoint, out->model->variables_by_path());
    } else {  // loaded in float32 as the file gives it, then widened into the model's variables
      LlamaModel staging(out->config, layouts);
      (void)load_hf_llama(checkpoint, staging.variables_by_path());
      std::map<std::string, Array*> target = out->model->variables_by_path();
      for (const auto& [path, array] : staging.variables_by_path()) {
        const HostTensor f32 = array->gather();
        HostTensor f64(DType::kF64, f32.shape());
        for (int64_t i = 0; i < f32.num_elements(); ++i) {
          f64.data_as<double>()[i] = f32.data_as<float>()[i];
        }
        *target.at(path) = distribute_tensor(f64, target.at(path)->layout());
      }
    }
  });
  return out;
}

// tokens: an integer numpy array (batch, seq) → I32 HostTensor; ValueError otherwise.
HostTensor tokens_from(const py::array& tokens, int64_t vocab) {
  if (tokens.ndim() != 2 || tokens.shape(0) < 1 || tokens.shape(1) < 1) {
    throw ValueError(
        fmt::format("tokens must be a 2-D (batch, seq) array of token ids, got shape {}",
                    py::str(py::tuple(py::cast(std::vector<py::ssize_t>(
                                tokens.shape(), tokens.shape() + tokens.ndim()))))
                        .cast<std::string>()));
  }
  if (tokens.dtype().kind() != 'i' && tokens.dtype().kind() != 'u') {
    throw ValueError(fmt::format("tokens must hold integers, got dtype {}",
                                 py::str(tokens.dtype()).cast<std::string>()));
  }
  const py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids(tokens);
  HostTensor out(DType::kI32, {ids.shape(0), ids.shape(1)});
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const int64_t id = ids.data()[i];
    if (id < 0 || id >= vocab) {
      throw ValueError(fmt::format("token {} at flat position {} is outside the vocabulary [0, {})",
                                   id, i, vocab));
    }
    out.data_as<int32_t>()[i] = static_cast<int32_t>(id);
  }
  return out;
}

py::array logits(PyCausalLM& self, const py::array& tokens) {
  const HostTensor t = tokens_from(tokens, self.config.vocab_size);
  HostTensor out;
  {
    py::gil_scoped_release release;
    LlamaModel& m = *self.model;
    const std::string& batch_axis = m.mesh().axis_names().front();
    const int64_t batch_split = m.mesh().axis_size(batch_axis);
    // Split the batch over the mesh's first axis when it divides it, else replicate.
    const TensorLayout layout = t.shape()[0] % batch_split == 0
                                    ? TensorLayout({batch_axis, None}, m.mesh())
                                    : TensorLayout::replicated(2, m.mesh());
    out = m.logits(distribute_tensor(t, layout)).gather();
  }
  py::array result(numpy_dtype(out.dtype()),
                   std::vector<py::ssize_t>(out.shape().begin(), out.shape().end()));
  std::memcpy(result.mutable_data(), out.data(), out.num_bytes());
  return result;
}

py::list generate_tokens(PyCausalLM& self, const std::vector<std::vector<int32_t>>& prompts,
                         int64_t max_new_tokens, const py::object& temperature,
                         const py::object& top_k, const py::object& top_p, uint64_t seed,
                         const std::optional<std::vector<int64_t>>& eos_token_ids) {
  GenerateOptions o{.max_new_tokens = max_new_tokens, .seed = seed};
  o.do_sample = !temperature.is_none() || !top_k.is_none() || !top_p.is_none();
  if (!temperature.is_none()) o.temperature = temperature.cast<double>();
  if (!top_k.is_none()) o.top_k = top_k.cast<int64_t>();
  if (!top_p.is_none()) o.top_p = top_p.cast<double>();
  // A model from from_config has no directory: no end-of-sequence token unless given.
  if (eos_token_ids) {
    o.eos_token_ids = *eos_token_ids;
  } else if (!self.directory.empty()) {
    o.eos_token_ids = read_eos_token_ids(self.directory);
  }
  GenerateResult r;
  {
    py::gil_scoped_release release;
    r = generate(*self.model, prompts, o);
  }
  return py::cast(r.tokens);
}

// Trains the model on token rows (rows, seq + 1) as `meshlayout train` does on its data file:
// step k on rows [k·B, (k+1)·B), inputs row[:-1], targets row[1:]; returns each step's loss
// (before its update). The rows go through the same TokenDataset as the CLI's (a temporary
// safetensors file), so the run is the CLI's bit for bit.
std::vector<double> train(PyCausalLM& self, const py::array& tokens, int64_t batch_size,
                          int64_t steps, const std::string& optimizer,
                          const py::object& learning_rate, const py::object& weight_decay) {
  const HostTensor rows = tokens_from(tokens, self.config.vocab_size);
  if (rows.shape()[1] < 2) {
    throw ValueError(fmt::format(
        "train: token rows need at least 2 columns (inputs row[:-1], targets row[1:]), got {}",
        rows.shape()[1]));
  }
  OptimizerOptions options;
  if (!learning_rate.is_none()) options.learning_rate = learning_rate.cast<double>();
  if (!weight_decay.is_none()) options.weight_decay = weight_decay.cast<double>();
  std::unique_ptr<Optimizer> opt = make_optimizer(optimizer, options);
  LlamaTrainResult result;
  io_call([&] {
    py::gil_scoped_release release;
    const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                       fmt::format("meshlayout-train-{}-{}.safetensors", ::getpid(),
                                                   reinterpret_cast<uintptr_t>(&self));
    struct Remove {
      std::filesystem::path path;
      ~Remove() {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
      }
    } remove{file};
    write_token_file(file.string(), rows);
    result = train_llama(*self.model, TokenDataset::open(file.string()), *opt,
                         {.batch_size = batch_size, .steps = steps});
  });
  return result.losses;
}

}  // namespace

void bind_models(py::module_& m) {
  py::class_<LlamaConfig>(m, "ModelConfig",
                          "A Hugging Face config.json of a family meshlayout runs (llama, "
                          "mistral, qwen2, qwen3, gemma, gemma2, mixtral, qwen3_moe, qwen2_moe)")
      .def_static(
          "from_file",
          [](const std::string& path) {
            return io_call([&] { return LlamaConfig::from_file(path); });
          },
          py::arg("path"))
      .def_static(
          "from_dict", [](const py::dict& d) { return config_from(d); }, py::arg("fields"))
      .def_readonly("family", &LlamaConfig::family)
      .def_readonly("vocab_size", &LlamaConfig::vocab_size)
      .def_readonly("hidden_size", &LlamaConfig::hidden_size)
      .def_readonly("intermediate_size", &LlamaConfig::intermediate_size)
      .def_readonly("num_hidden_layers", &LlamaConfig::num_hidden_layers)
      .def_readonly("num_attention_heads", &LlamaConfig::num_attention_heads)
      .def_readonly("num_key_value_heads", &LlamaConfig::num_key_value_heads)
      .def_readonly("head_dim", &LlamaConfig::head_dim)
      .def_readonly("tie_word_embeddings", &LlamaConfig::tie_word_embeddings)
      .def_readonly("max_position_embeddings", &LlamaConfig::max_position_embeddings)
      .def_readonly("num_experts", &LlamaConfig::num_experts)  // 0: a dense model
      .def_readonly("num_experts_per_tok", &LlamaConfig::num_experts_per_tok)
      .def_property_readonly("expert_intermediate_size", &LlamaConfig::expert_intermediate_size)
      .def_property_readonly("architecture", &LlamaConfig::architecture)
      .def("to_json", &LlamaConfig::to_json)
      .def("__repr__", [](const LlamaConfig& c) {
        return fmt::format(
            "ModelConfig(family='{}', hidden_size={}, num_hidden_layers={}, "
            "num_attention_heads={}, num_key_value_heads={}, head_dim={}, "
            "vocab_size={})",
            c.family, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim, c.vocab_size);
      });

  py::class_<PyCausalLM>(m, "CausalLM",
                         "A causal language model of any supported family, born sharded under "
                         "a LayoutMap and loaded shard by shard from a Hugging Face directory")
      .def_static("from_pretrained", &from_pretrained, py::arg("directory"),
                  py::arg("rules") = py::none(), py::arg("dtype") = "float32")
      .def_static("from_config", &from_config, py::arg("config"), py::arg("rules") = py::none(),
                  py::arg("dtype") = "float32")
      .def_property_readonly("config", [](const PyCausalLM& s) { return s.config; })
      .def_property_readonly("variable_paths",
                             [](PyCausalLM& s) {
                               std::vector<std::string> out;
                               for (const VariablePtr& v : s.model->variables()) {
                                 out.push_back(v->path());
                               }
                               return out;
                             })
      .def(
          "variable_layout",
          [](PyCausalLM& s, const std::string& path) {
            for (const VariablePtr& v : s.model->variables()) {
              if (v->path() == path) return v->value().layout();
            }
            throw py::key_error(
                fmt::format("no variable {} in this {} model", path, s.config.family));
          },
          py::arg("path"))
      .def("logits", &logits, py::arg("tokens"))
      .def("train", &train, py::arg("tokens"), py::arg("batch_size"), py::arg("steps"),
           py::arg("optimizer") = "adamw", py::arg("learning_rate") = py::none(),
           py::arg("weight_decay") = py::none())
      .def("generate", &generate_tokens, py::arg("prompts"), py::arg("max_new_tokens") = 16,
           py::arg("temperature") = py::none(), py::arg("top_k") = py::none(),
           py::arg("top_p") = py::none(), py::arg("seed") = 0,
           py::arg("eos_token_ids") = py::none());

  m.def(
      "write_random_model",
      [](const std::string& directory, const py::object& config, float kernel_scale) {
        const LlamaConfig c = config_from(config);
        io_call([&] {
          py::gil_scoped_release release;
          write_random_hf_llama(directory, c, {.kernel_scale = kernel_scale});
        });
      },
      py::arg("directory"), py::arg("config"), py::arg("kernel_scale") = 8.0f);
}

}  // namespace meshlayout::python
