// generate_command.h — `meshlayout generate`: text generation with a Hugging Face Llama-style
// checkpoint, born sharded on a device mesh under a rules file: text in (tokenised with the
// model directory's tokenizer) and text out, streamed as it is produced, or token ids in and
// out. Works unchanged under mpirun (each process holds only its devices' shards; process 0
// prints).
//
//   meshlayout generate --model DIR --prompt "Once upon a time" [--prompt "text2" …]
//       [--max-new-tokens 32] [--temperature 0.7] [--top-k 50] [--top-p 0.9] [--seed 1]
//       [--rules examples/rules/llama_megatron.json] [--mesh batch=2,model=4] [--json]
//   meshlayout generate --model DIR --prompt-ids 5,17,42 [--prompt-ids 8,9 …] …
//
// DIR holds config.json and model.safetensors (or model.safetensors.index.json and its
// shards); with --prompt also tokenizer.json or tokenizer.model (tokenizers/tokenizer.h: the
// special tokens, a BOS for instance, are added as the tokenizer's post-processor adds them).
// Several prompts run as one batch (left-padded). Greedy unless --temperature, --top-k,
// --top-p or --seed is given: then sampling (models/generation.h: the same seed gives the same
// tokens on any mesh and process count; seed 0 by default). A sequence stops at an EOS id of
// generation_config.json (else config.json), or after --max-new-tokens. Without --rules every
// variable is replicated. The mesh is --mesh if given, else the rules file's "mesh", else every
// device on the "model" axis with a size-1 "batch" axis.
//
// Output: with one text prompt, the prompt and then the new text as each token arrives (flushed
// per token), after a header (model, mesh, rules, load time) and before a report (the ids,
// prefill and decode tokens/s, per-device memory); with several, each prompt's text at the
// end. --json prints one line per generated token instead, {"step": 0, "token": 17, "logprob":
// -0.12345678901234567} (with "sequence" when there are several prompts and "text", the
// token's new text, for text prompts).
//
// Example:
//   GenerateCommandOptions o{.model_dir = dir, .prompts = {"the cat"}, .max_new_tokens = 4};
//   int code = run_generate(o, std::cout);   // 0; errors are thrown (main.cc prints them)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/cli/llama_command_setup.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::cli {

struct GenerateCommandOptions {
  std::string model_dir;
  std::string rules_path;               // empty: no rules, every variable replicated
  std::optional<std::string> mesh;      // overrides the rules file's mesh
  std::vector<std::string> prompts;     // --prompt: text, tokenised with DIR's tokenizer
  std::vector<std::string> prompt_ids;  // --prompt-ids: "5,17,42" each
  int64_t max_new_tokens = 32;
  // Sampling when any of these is given (greedy otherwise).
  std::optional<double> temperature;
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<uint64_t> seed;
  bool json = false;
  std::string device = "cpu";  // --device: cpu or gpu (the mesh's devices)
};

/// Text of generated ids as it grows, for streaming: push(id) returns the text that id adds
/// (the decode of every id so far, special tokens skipped, past what was already returned),
/// holding back a tail that is not yet whole UTF-8 (a character split over tokens) or ends in
/// U+FFFD (a byte-fallback character still incomplete); finish() returns what is left.
class TokenTextStream {
 public:
  explicit TokenTextStream(const tokenizers::Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  std::string push(int64_t id);
  std::string finish();

 private:
  const tokenizers::Tokenizer* tokenizer_;
  std::vector<int64_t> ids_;
  size_t emitted_ = 0;  // bytes of the decoded text already returned
};

/// The token ids of a --prompt-ids: a comma-separated list of whole numbers from 0 to 2^31-1
/// (spaces around items allowed). ValueError quoting the text and the item that is not one.
std::vector<int32_t> parse_prompt(std::string_view text);

/// The GenerateOptions of the decoding options (generate's and chat's): sampling when any of
/// temperature, top_k, top_p or seed is given. ValueError naming the option as written
/// (--max-new-tokens below 1, --temperature <= 0, --top-k < 0, --top-p outside (0, 1]).
GenerateOptions decoding_options(int64_t max_new_tokens, std::optional<double> temperature,
                                 std::optional<int64_t> top_k, std::optional<double> top_p,
                                 std::optional<uint64_t> seed);

/// The mesh used without --mesh and without a mesh in the rules file: batch=1,model=N over
/// list_devices() (list_devices("gpu") for kCuda).
DeviceMesh default_generate_mesh(DeviceKind kind = DeviceKind::kCpu);

/// What generate and chat open before their own parts: `device` checked ("cpu" or "gpu",
/// else a ValueError naming it), the model directory and rules file on their mesh
/// (open_llama_setup; without `mesh` or a mesh in the rules file, default_generate_mesh of the
/// device kind), and the runtime of the mesh's devices. Throws; does not agree across
/// processes (the commands fold it into their agreement).
///
///   GenerationSetup s = open_generation_setup(dir, "", std::nullopt, "cpu");
///   s.llama.mesh->to_string();   // "mesh[batch=1,model=4]" on 4 devices
struct GenerationSetup {
  LlamaSetup llama;
  std::shared_ptr<Runtime> device_runtime;  // default_runtime() of the device kind
};
GenerationSetup open_generation_setup(const std::string& model_dir, const std::string& rules_path,
                                      const std::optional<std::string>& mesh,
                                      const std::string& device);

/// Runs the command on the default runtime (every process calls it; output from process 0
/// only); returns the exit code (0). Bad options (no prompt, both --prompt and --prompt-ids,
/// sampling values out of range), a missing or invalid model directory or tokenizer, a rules
/// file that cannot be read or does not fit the model, and generate()'s own ValueErrors (a
/// token id >= vocab_size, a prompt too long for the context window) are thrown, by every
/// process alike.
int run_generate(const GenerateCommandOptions& options, std::ostream& out);

void add_generate_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
