// llama_command_setup.h — what the Llama commands (generate, train) share: opening a Hugging
// Face Llama directory with a rules file on a mesh (checked on every process, failures agreed),
// and the report pieces (per-device memory over all processes, exact JSON numbers).
//
// (agree_or_rethrow, which the commands use around it, is in cli_checks.h.)
//
// Example:
//   LlamaSetup s = open_llama_setup(model_dir, rules_path, mesh_text, default_generate_mesh);
//   LlamaModel model(s.checkpoint->config(), *s.rules);
//   log << device_memory_lines(*default_runtime());
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "meshlayout/cli/cli_checks.h"
#include "meshlayout/cli/command_agreement.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout::cli {

/// A JSON number for a double, with every digit needed to read it back exactly (JSON has no
/// NaN or infinity: those are null).
std::string json_double(double x);

/// "  cpu:0  live 1.0 MiB  peak 2.0 MiB\n" for every device of every process, in process order.
/// Collective: each process describes its own devices.
std::string device_memory_lines(Runtime& runtime);

/// Elements of every variable of the model.
int64_t parameter_count(const LlamaModel& model);

/// What train and generate say of a model: "MixtralForCausalLM: vocab 512, hidden 128, 2
/// layers, 8 heads / 2 key-value heads, ff 256, 4 experts (top-2), 935552 parameters, tied
/// embeddings".
std::string model_summary(const LlamaModel& model);

struct LlamaSetup {
  std::optional<DeviceMesh> mesh;
  std::optional<LayoutMap> rules;
  std::optional<HfLlamaCheckpoint> checkpoint;
  std::string rules_text;  // for reports: the file, its rule count and mode, or "none: …"
  /// What the processes must agree on: config.json as parsed, the rules file's bytes, the
  /// weights' safetensors headers and sizes (command_agreement.h).
  InputDigest inputs;
};

/// Builds the model sharded (each device allocates its boxes) with the failure of any one
/// process agreed by all: a process whose devices cannot hold their shards (a smaller memory
/// budget, a machine out of memory) used to fail alone while the others waited for it.
std::unique_ptr<LlamaModel> build_llama_agreed(Runtime& runtime, const LlamaConfig& config,
                                               const LayoutMap& rules);

/// Checks `model_dir` (NotFoundError if missing, ValueError if not a directory, naming it and
/// what was expected), reads the rules file if any, picks the mesh (`mesh_text`, else the
/// rules file's, else `default_mesh()`) and opens the checkpoint's headers, recording each
/// input in `inputs`. Throws; does not agree across processes (callers fold it into their own
/// agreement with agree_on_command).
/// `device_kind` kCuda puts the mesh on gpu:K devices (--device gpu).
LlamaSetup open_llama_setup(const std::string& model_dir, const std::string& rules_path,
                            const std::optional<std::string>& mesh_text,
                            const std::function<DeviceMesh()>& default_mesh,
                            DeviceKind device_kind = DeviceKind::kCpu);

}  // namespace meshlayout::cli
