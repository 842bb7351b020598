#include "meshlayout/cli/generate_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include "meshlayout/cli/command_agreement.h"
#include "meshlayout/cli/llama_command_setup.h"
#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/plan/text_format.h"
#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/operation_agreement.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string rate(int64_t tokens, double seconds) {
  if (tokens == 0) return "none";
  if (seconds <= 0) return fmt::format("{} tokens in < 1 µs", tokens);
  return fmt::format("{} tokens in {:.4f} s = {:.1f} tokens/s", tokens, seconds,
                     static_cast<double>(tokens) / seconds);
}

}  // namespace

std::vector<int32_t> parse_prompt(std::string_view text) {
  const auto fail = [&](const std::string& why) {
    return ValueError(fmt::format(
        "--prompt {} is not a comma-separated list of token ids (whole numbers from 0 to {}, "
        "e.g. 5,17,42): {}",
        quote(text), std::numeric_limits<int32_t>::max(), why));
  };
  if (trim(text).empty()) throw fail("it is empty");
  std::vector<int32_t> ids;
  for (const std::string& raw : split(text, ',')) {
    const std::string_view item = trim(raw);
    if (item.empty()) throw fail(fmt::format("item {} is empty", ids.size()));
    int64_t value = 0;
    for (char c : item) {
      if (c < '0' || c > '9')
        throw fail(fmt::format("item {} {} is not a whole number", ids.size(), quote(item)));
      value = value * 10 + (c - '0');
      if (value > std::numeric_limits<int32_t>::max()) {
        throw fail(fmt::format("item {} {} is too large", ids.size(), quote(item)));
      }
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

DeviceMesh default_generate_mesh() {
  const std::vector<std::string> devices = list_devices();
  return DeviceMesh({1, static_cast<int64_t>(devices.size())}, {"batch", "model"}, devices);
}

int run_generate(const GenerateCommandOptions& options, std::ostream& out) {
  const std::shared_ptr<Runtime> runtime = default_runtime();
  const bool leader = runtime->process_id() == 0;

  // Every process checks its own options and opens the checkpoint (headers only); all fail
  // together if one does, and all fail with one message if they were given different options
  // or read different files (command_agreement.h).
  std::vector<int32_t> prompt;
  LlamaSetup setup;
  std::vector<std::string> resolved;
  std::exception_ptr failure;
  try {
    if (options.model_dir.empty()) {
      throw ValueError(
          "--model is required: a Hugging Face Llama directory (config.json and "
          "model.safetensors)");
    }
    prompt = parse_prompt(options.prompt);
    if (options.max_new_tokens < 1) {
      throw ValueError(
          fmt::format("--max-new-tokens must be at least 1, got {}", options.max_new_tokens));
    }
    setup = open_llama_setup(options.model_dir, options.rules_path, options.mesh,
                             default_generate_mesh);
    // What the options resolved to; the options themselves, as parsed, follow (all of them).
    resolved = {fmt::format("mesh={}", setup.mesh->to_string()),
                fmt::format("prompt={}", join_ids(prompt)),
                fmt::format("local devices per process={}", runtime->local_device_count())};
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_command(*runtime, "the generate command", std::move(resolved), setup.inputs, failure);
  const std::optional<LayoutMap>& rules = setup.rules;
  const std::optional<HfLlamaCheckpoint>& checkpoint = setup.checkpoint;
  const std::string& rules_text = setup.rules_text;
  const LlamaConfig& config = checkpoint->config();

  std::ostringstream log;  // the report, printed by process 0
  auto start = Clock::now();
  const std::unique_ptr<LlamaModel> built = build_llama_agreed(*runtime, config, *rules);
  LlamaModel& model = *built;
  const double build_seconds = seconds_since(start);
  start = Clock::now();
  const HfLoadReport load = load_hf_llama(*checkpoint, model.variables_by_path());
  const double load_seconds = seconds_since(start);

  if (!options.json) {
    log << fmt::format(
        "model: {} (Llama: vocab {}, hidden {}, {} layers, {} heads / {} key-value heads, ff {}, "
        "{} parameters{})\n",
        quote(options.model_dir), config.vocab_size, config.hidden_size, config.num_hidden_layers,
        config.num_attention_heads, config.num_key_value_heads, config.intermediate_size,
        parameter_count(model), config.tie_word_embeddings ? ", tied embeddings" : "");
    log << fmt::format("mesh: {} ({} process{} x {} local devices)\n", model.mesh().to_string(),
                       runtime->num_processes(), runtime->num_processes() == 1 ? "" : "es",
                       runtime->local_device_count());
    log << "rules: " << rules_text << "\n";
    log << fmt::format(
        "built sharded in {:.1f} ms; loaded {} tensors in {:.1f} ms ({} read by process 0)\n",
        build_seconds * 1e3, load.tensors_loaded, load_seconds * 1e3,
        format_bytes(load.bytes_read));
    log << fmt::format("prompt ({} tokens): {}\n", prompt.size(), join_ids(prompt));
  }

  GenerateOptions generate_options{.max_new_tokens = options.max_new_tokens};
  if (options.json && leader) {
    generate_options.on_token = [&out](int64_t step, int64_t sequence, int32_t token,
                                       double logprob) {
      if (sequence != 0) return;
      out << fmt::format("{{\"step\": {}, \"token\": {}, \"logprob\": {}}}\n", step, token,
                         json_double(logprob))
          << std::flush;
    };
  }
  const GenerateResult result = generate(model, {prompt}, generate_options);
  if (options.json) return 0;

  const std::vector<int32_t> generated =
      result.tokens.empty() ? std::vector<int32_t>{} : result.tokens[0];
  log << fmt::format("generated ({} tokens): {}\n", generated.size(), join_ids(generated));
  log << "prefill: " << rate(result.prefill_tokens, result.prefill_seconds) << "\n";
  log << "decode:  " << rate(result.decode_tokens, result.decode_seconds) << "\n";
  log << "memory per device (live now, peak since start):\n" << device_memory_lines(*runtime);
  if (leader) out << log.str() << std::flush;
  return 0;
}

void add_generate_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Greedy generation of token ids with a Hugging Face Llama checkpoint, sharded on a mesh "
      "under a rules file (works under mpirun: each process holds only its devices' shards).");
  cmd->add_option("--model", o->model_dir,
                  "Hugging Face Llama directory: config.json and model.safetensors (or a sharded "
                  "model.safetensors.index.json)")
      ->required();
  cmd->add_option("--rules", o->rules_path,
                  "JSON rules file (e.g. examples/rules/llama_megatron.json); default: every "
                  "variable replicated");
  cmd->add_option("--mesh", o->mesh,
                  "mesh, e.g. batch=2,model=4; default: the rules file's \"mesh\", else "
                  "batch=1,model=<all devices>");
  cmd->add_option("--prompt", o->prompt, "prompt token ids, e.g. 5,17,42")->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate (at least 1)")
      ->required();
  cmd->add_flag("--json", o->json,
                "print one JSON object per generated token: {\"step\", \"token\", \"logprob\"}");
  cmd->callback([o, exit_code] { *exit_code = run_generate(*o, std::cout); });
}

}  // namespace meshlayout::cli
