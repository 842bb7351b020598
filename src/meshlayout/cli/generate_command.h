// generate_command.h — `meshlayout generate`: greedy text generation (token ids in, token ids
// out) with a Hugging Face Llama checkpoint, born sharded on a device mesh under a rules file.
// Works unchanged under mpirun (each process holds only its devices' shards; process 0 prints).
//
//   meshlayout generate --model DIR --prompt 5,17,42 --max-new-tokens 8
//       [--rules examples/rules/llama_megatron.json] [--mesh batch=2,model=4] [--json]
//
// DIR holds config.json and model.safetensors (or model.safetensors.index.json and its
// shards). Without --rules every variable is replicated. The mesh is --mesh if given, else the
// rules file's "mesh", else every device on the "model" axis with a size-1 "batch" axis
// (batch=1,model=N: both axis names keras-hub's rules use exist). --json prints one line per
// generated token, {"step": 0, "token": 17, "logprob": -0.12345678901234567}; otherwise a
// report: the prompt, the generated ids, prefill and decode tokens/s and per-device memory.
//
// Example:
//   GenerateCommandOptions o{.model_dir = dir, .prompt = "5,17,42", .max_new_tokens = 4};
//   int code = run_generate(o, std::cout);   // 0; errors are thrown (main.cc prints them)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/layout/device_mesh.h"

namespace meshlayout::cli {

struct GenerateCommandOptions {
  std::string model_dir;
  std::string rules_path;           // empty: no rules, every variable replicated
  std::optional<std::string> mesh;  // overrides the rules file's mesh
  std::string prompt;               // "5,17,42"
  int64_t max_new_tokens = 0;
  bool json = false;
};

/// The token ids of a --prompt: a comma-separated list of whole numbers from 0 to 2^31-1
/// (spaces around items allowed). ValueError quoting the text and the item that is not one.
std::vector<int32_t> parse_prompt(std::string_view text);

/// The mesh used without --mesh and without a mesh in the rules file: batch=1,model=N over
/// list_devices().
DeviceMesh default_generate_mesh();

/// Runs the command on the default runtime (every process calls it; output from process 0
/// only); returns the exit code (0). Bad options, a missing or invalid model directory, a rules
/// file that cannot be read or does not fit the model, and generate()'s own ValueErrors (a
/// token id >= vocab_size, a prompt too long for max_position_embeddings) are thrown, by every
/// process alike.
int run_generate(const GenerateCommandOptions& options, std::ostream& out);

void add_generate_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
