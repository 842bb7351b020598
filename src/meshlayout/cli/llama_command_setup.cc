// llama_command_setup.cc — see llama_command_setup.h.
#include "meshlayout/cli/llama_command_setup.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/runtime/communicator.h"

namespace meshlayout::cli {

std::string json_double(double x) { return std::isfinite(x) ? fmt::format("{:.17g}", x) : "null"; }

std::string device_memory_lines(Runtime& runtime) {
  std::string mine;
  for (VirtualDevice* d : runtime.local_devices()) {
    const MemoryStats s = d->memory().stats();
    mine += fmt::format("  {:<8} live {:>10}  peak {:>10}\n", d->name(),
                        format_bytes(static_cast<uint64_t>(s.bytes_live)),
                        format_bytes(static_cast<uint64_t>(s.peak_bytes)));
  }
  const int n = runtime.num_processes();
  if (n == 1) return mine;
  uint64_t size = mine.size();
  std::vector<uint64_t> sizes(static_cast<size_t>(n));
  runtime.comm().all_gather(&size, sizeof size, sizes.data());
  uint64_t longest = 0;
  for (uint64_t s : sizes) longest = std::max(longest, s);
  mine.resize(longest, '\0');
  std::vector<char> all(static_cast<size_t>(longest) * static_cast<size_t>(n));
  runtime.comm().all_gather(mine.data(), longest, all.data());
  std::string text;
  for (int p = 0; p < n; ++p) text.append(all.data() + p * longest, sizes[static_cast<size_t>(p)]);
  return text;
}

std::string model_summary(const LlamaModel& model) {
  const LlamaConfig& c = model.config();
  const std::string experts = c.moe()
                                  ? fmt::format(", {} experts (top-{}) of {}", c.num_experts,
                                                c.num_experts_per_tok, c.expert_intermediate_size())
                                  : std::string();
  return fmt::format(
      "{}: vocab {}, hidden {}, {} layers, {} heads / {} key-value heads, ff {}{}, {} "
      "parameters{}",
      c.architecture(), c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
      c.num_key_value_heads, c.intermediate_size, experts, parameter_count(model),
      c.tie_word_embeddings ? ", tied embeddings" : "");
}

int64_t parameter_count(const LlamaModel& model) {
  int64_t n = 0;
  for (const VariablePtr& v : model.variables()) {
    int64_t e = 1;
    for (int64_t d : v->shape()) e *= d;
    n += e;
  }
  return n;
}

std::unique_ptr<LlamaModel> build_llama_agreed(Runtime& runtime, const LlamaConfig& config,
                                               const LayoutMap& rules) {
  std::unique_ptr<LlamaModel> model;
  std::exception_ptr failure;
  try {
    model = std::make_unique<LlamaModel>(config, rules);
  } catch (...) {
    failure = std::current_exception();
    model.reset();  // free what was built before other processes go on
  }
  agree_or_rethrow(runtime, failure);
  return model;
}

LlamaSetup open_llama_setup(const std::string& model_dir, const std::string& rules_path,
                            const std::optional<std::string>& mesh_text,
                            const std::function<DeviceMesh()>& default_mesh,
                            DeviceKind device_kind) {
  if (model_dir.empty()) {
    throw ValueError(
        "--model is required: a Hugging Face Llama directory (config.json and model.safetensors)");
  }
  std::error_code ec;
  const auto status = std::filesystem::status(model_dir, ec);
  if (!std::filesystem::exists(status)) {
    throw NotFoundError(
        fmt::format("--model {}: no such directory (expected a Hugging Face Llama "
                    "directory holding config.json and model.safetensors)",
                    quote(model_dir)));
  }
  if (!std::filesystem::is_directory(status)) {
    throw ValueError(
        fmt::format("--model {} is not a directory (expected a Hugging Face Llama "
                    "directory holding config.json and model.safetensors)",
                    quote(model_dir)));
  }
  LlamaSetup setup;
  setup.rules_text = "none: every variable replicated";
  std::optional<RulesFile> file;
  if (!rules_path.empty()) {
    // The bytes read are the bytes digested: processes given the same path but other contents
    // (per-process working directories, a file edited on one node) must not go on.
    const std::string text = read_regular_file(rules_path, kMaxJsonFileBytes, "rules file");
    setup.inputs.add_text(fmt::format("rules file {}", quote(rules_path)), text);
    file = parse_rules_json(text, rules_path);
  } else {
    setup.inputs.add_absent("rules file");
  }
  if (mesh_text) {
    setup.mesh = DeviceMesh::from_string(*mesh_text);
  } else if (file && file->mesh) {
    setup.mesh = file->mesh;
  } else {
    setup.mesh = default_mesh();
  }
  setup.mesh = setup.mesh->with_device_kind(device_kind);
  if (file) {
    file->mesh = *setup.mesh;
    setup.rules = file->to_layout_map();
    setup.rules_text = fmt::format("{} ({} rules, {} mode)", quote(rules_path), setup.rules->size(),
                                   match_mode_name(file->mode));
  } else {
    setup.rules.emplace(*setup.mesh);
  }
  setup.checkpoint = HfLlamaCheckpoint::open(model_dir);
  setup.inputs.add_text("config.json (as parsed)", setup.checkpoint->config().to_json());
  setup.inputs.add_checkpoint("weights", setup.checkpoint->checkpoint());
  return setup;
}

}  // namespace meshlayout::cli
