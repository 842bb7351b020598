#include "meshlayout/cli/generate_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/cli/command_agreement.h"
#include "meshlayout/cli/llama_command_setup.h"
#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/plan/text_format.h"
#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/operation_agreement.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/tokenizers/tokenizer.h"

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
        "--prompt-ids {} is not a comma-separated list of token ids (whole numbers from 0 to {}, "
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

DeviceMesh default_generate_mesh(DeviceKind kind) {
  const std::vector<std::string> devices = list_devices(device_kind_name(kind));
  if (devices.empty()) {
    throw ValueError(
        fmt::format("--device {}: this process has no {} devices (no CUDA GPU, or a build without "
                    "-DMESHLAYOUT_CUDA=ON; {} sets virtual ones)",
                    device_kind_name(kind), device_kind_name(kind), kGpuDevicesEnvVar));
  }
  return DeviceMesh({1, static_cast<int64_t>(devices.size())}, {"batch", "model"}, devices);
}

namespace {

// Bytes at the end of `text` that do not yet make a whole UTF-8 character (0 if it ends whole).
size_t incomplete_utf8_tail(const std::string& text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

std::string TokenTextStream::push(int64_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_->decode(ids_, /*skip_special_tokens=*/true);
  if (text.ends_with("\xEF\xBF\xBD")) return "";  // U+FFFD: a character still incomplete
  const size_t whole = text.size() - incomplete_utf8_tail(text);
  if (whole <= emitted_) return "";
  std::string out = text.substr(emitted_, whole - emitted_);
  emitted_ = whole;
  return out;
}

std::string TokenTextStream::finish() {
  const std::string text = tokenizer_->decode(ids_, /*skip_special_tokens=*/true);
  if (text.size() <= emitted_) return "";
  std::string out = text.substr(emitted_);
  emitted_ = text.size();
  return out;
}

GenerateOptions decoding_options(int64_t max_new_tokens, std::optional<double> temperature,
                                 std::optional<int64_t> top_k, std::optional<double> top_p,
                                 std::optional<uint64_t> seed) {
  if (max_new_tokens < 1) {
    throw ValueError(fmt::format("--max-new-tokens must be at least 1, got {}", max_new_tokens));
  }
  GenerateOptions g;
  g.max_new_tokens = max_new_tokens;
  g.do_sample = temperature || top_k || top_p || seed;
  if (temperature) g.temperature = *temperature;
  if (top_k) g.top_k = *top_k;
  if (top_p) g.top_p = *top_p;
  if (seed) g.seed = *seed;
  try {
    check_sampling_options(g);
  } catch (const ValueError& e) {  // name the options as the user wrote them
    std::string message = e.what();
    for (const auto& [from, to] : {std::pair{"temperature", "--temperature"},
                                   std::pair{"top_k", "--top-k"}, std::pair{"top_p", "--top-p"}}) {
      if (const size_t at = message.find(std::string("generate: ") + from);
          at != std::string::npos) {
        message =
            to + message.substr(at + std::string("generate: ").size() + std::string(from).size());
      }
    }
    throw ValueError(message);
  }
  return g;
}

GenerationSetup open_generation_setup(const std::string& model_dir, const std::string& rules_path,
                                      const std::optional<std::string>& mesh,
                                      const std::string& device) {
  if (device != "cpu" && device != "gpu") {
    throw ValueError(fmt::format("--device {}: expected cpu or gpu", quote(device)));
  }
  const DeviceKind kind = device == "gpu" ? DeviceKind::kCuda : DeviceKind::kCpu;
  GenerationSetup setup;
  setup.llama = open_llama_setup(
      model_dir, rules_path, mesh, [kind] { return default_generate_mesh(kind); }, kind);
  setup.device_runtime = default_runtime(kind);
  return setup;
}

int run_generate(const GenerateCommandOptions& options, std::ostream& out) {
  const std::shared_ptr<Runtime> runtime = default_runtime();
  const bool leader = runtime->process_id() == 0;

  // Every process checks its own options, opens the checkpoint (headers only) and tokenises the
  // prompts; all fail together if one does, and all fail with one message if they were given
  // different options or read different files (command_agreement.h).
  std::vector<std::vector<int32_t>> prompts;
  std::unique_ptr<tokenizers::Tokenizer> tokenizer;
  GenerateOptions generate_options;
  LlamaSetup setup;
  std::vector<std::string> resolved;
  std::exception_ptr failure;
  std::shared_ptr<Runtime> device_runtime = runtime;  // the runtime of the mesh's devices
  const bool text = !options.prompts.empty();
  try {
    if (options.model_dir.empty()) {
      throw ValueError(
          "--model is required: a Hugging Face Llama directory (config.json and "
          "model.safetensors)");
    }
    if (text && !options.prompt_ids.empty()) {
      throw ValueError(fmt::format(
          "give the prompts as --prompt (text) or as --prompt-ids (token ids), not both: got {} "
          "--prompt and {} --prompt-ids",
          options.prompts.size(), options.prompt_ids.size()));
    }
    if (!text && options.prompt_ids.empty()) {
      throw ValueError(
          "a prompt is required: --prompt \"text\" (tokenised with the model directory's "
          "tokenizer) or --prompt-ids 5,17,42, each repeatable");
    }
    generate_options = decoding_options(options.max_new_tokens, options.temperature, options.top_k,
                                        options.top_p, options.seed);
    GenerationSetup opened =
        open_generation_setup(options.model_dir, options.rules_path, options.mesh, options.device);
    setup = std::move(opened.llama);
    device_runtime = std::move(opened.device_runtime);
    if (text) {
      tokenizer = tokenizers::load_tokenizer(options.model_dir);
      for (const std::string& prompt : options.prompts) {
        std::vector<int32_t> ids;
        for (const int64_t id : tokenizer->encode(prompt, /*add_special_tokens=*/true)) {
          ids.push_back(static_cast<int32_t>(id));  // ids < vocab: checked by generate
        }
        if (ids.empty()) {
          throw ValueError(fmt::format("--prompt {} gives no tokens", quote(prompt)));
        }
        prompts.push_back(std::move(ids));
      }
    } else {
      for (const std::string& ids : options.prompt_ids) prompts.push_back(parse_prompt(ids));
    }
    generate_options.eos_token_ids = read_eos_token_ids(options.model_dir);
    // What the options resolved to; the options themselves, as parsed, follow (all of them).
    resolved = {fmt::format("mesh={}", setup.mesh->to_string()),
                fmt::format("local devices per process={}", device_runtime->local_device_count())};
    for (size_t b = 0; b < prompts.size(); ++b) {
      resolved.push_back(fmt::format("prompt {}={}", b, join_ids(prompts[b])));
    }
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
  const size_t B = prompts.size();
  const auto numbered = [&](const char* what, size_t b) {
    return B == 1 ? std::string(what) : fmt::format("{} {}", what, b);
  };

  if (!options.json) {
    log << fmt::format("model: {} ({})\n", quote(options.model_dir), model_summary(model));
    log << fmt::format("mesh: {} ({} process{} x {} local devices)\n", model.mesh().to_string(),
                       runtime->num_processes(), runtime->num_processes() == 1 ? "" : "es",
                       device_runtime->local_device_count());
    log << "rules: " << rules_text << "\n";
    log << fmt::format(
        "built sharded in {:.1f} ms; loaded {} tensors in {:.1f} ms ({} read by process 0)\n",
        build_seconds * 1e3, load.tensors_loaded, load_seconds * 1e3,
        format_bytes(load.bytes_read));
    if (tokenizer) log << "tokenizer: " << tokenizer->describe() << "\n";
    log << fmt::format(
        "decoding: {}; stop on {}\n",
        generate_options.do_sample
            ? fmt::format("sampling (temperature {}, top-k {}, top-p {}, seed {})",
                          generate_options.temperature, generate_options.top_k,
                          generate_options.top_p, generate_options.seed)
            : std::string("greedy"),
        generate_options.eos_token_ids.empty()
            ? fmt::format("{} new tokens", options.max_new_tokens)
            : fmt::format("EOS id {} or {} new tokens",
                          fmt::join(generate_options.eos_token_ids, ", "), options.max_new_tokens));
    for (size_t b = 0; b < B; ++b) {
      log << fmt::format("{} ({} tokens): {}\n", numbered("prompt", b), prompts[b].size(),
                         join_ids(prompts[b]));
    }
  }

  // One text prompt streams: the header, the prompt, then each token's text as it comes.
  const bool stream = text && !options.json && B == 1;
  std::vector<TokenTextStream> streams;
  if (tokenizer) {
    for (size_t b = 0; b < B; ++b) streams.emplace_back(*tokenizer);
  }
  if (stream && leader) {
    out << log.str() << "\n" << options.prompts[0] << std::flush;
    log.str("");
  }
  if (leader && (options.json || stream)) {
    generate_options.on_token = [&](int64_t step, int64_t sequence, int32_t token, double logprob) {
      std::string piece;
      if (tokenizer) piece = streams[static_cast<size_t>(sequence)].push(token);
      if (stream) {
        out << piece << std::flush;
        return;
      }
      out << fmt::format("{{\"step\": {}, ", step);
      if (B > 1) out << fmt::format("\"sequence\": {}, ", sequence);
      out << fmt::format("\"token\": {}, \"logprob\": {}", token, json_double(logprob));
      if (tokenizer)
        out << ", \"text\": "
            << nlohmann::json(piece).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      out << "}\n" << std::flush;
    };
  }
  const GenerateResult result = generate(model, prompts, generate_options);
  if (options.json) return 0;

  if (stream) {
    log << streams[0].finish() << "\n\n";
  } else if (text) {
    for (size_t b = 0; b < B; ++b) {
      for (const int32_t token : result.tokens[b]) (void)streams[b].push(token);
      log << fmt::format("--- {}\n{}{}\n", numbered("text", b), options.prompts[b],
                         streams[b].finish());
    }
  }
  for (size_t b = 0; b < B; ++b) {
    log << fmt::format("{} ({} tokens{}): {}\n", numbered("generated", b), result.tokens[b].size(),
                       result.stopped_on_eos[b] ? ", stopped on EOS" : "",
                       join_ids(result.tokens[b]));
  }
  log << "prefill: " << rate(result.prefill_tokens, result.prefill_seconds) << "\n";
  log << "decode:  " << rate(result.decode_tokens, result.decode_seconds) << "\n";
  log << "memory per device (live now, peak since start):\n"
      << device_memory_lines(*device_runtime);
  if (leader) out << log.str() << std::flush;
  return 0;
}

void add_generate_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<GenerateCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Text generation with a Hugging Face Llama-style checkpoint, sharded on a mesh under a "
      "rules file: text (or token ids) in, text streamed out; greedy, or sampling with "
      "--temperature/--top-k/--top-p/--seed (works under mpirun: each process holds only its "
      "devices' shards; process 0 prints).");
  cmd->add_option("--model", o->model_dir,
                  "Hugging Face directory: config.json and model.safetensors (or a sharded "
                  "model.safetensors.index.json); tokenizer.json or tokenizer.model for --prompt")
      ->required();
  cmd->add_option("--rules", o->rules_path,
                  "JSON rules file (e.g. examples/rules/llama_megatron.json); default: every "
                  "variable replicated");
  cmd->add_option("--mesh", o->mesh,
                  "mesh, e.g. batch=2,model=4; default: the rules file's \"mesh\", else "
                  "batch=1,model=<all devices>");
  cmd->add_option(
      "--device", o->device,
      "devices to shard on: cpu (list_devices(), the default) or gpu (list_devices(\"gpu\"): "
      "one per GPU, or MESHLAYOUT_GPU_DEVICES virtual ones)");
  cmd->add_option("--prompt", o->prompts,
                  "prompt text, tokenised with the model directory's tokenizer (special tokens "
                  "as its post-processor adds them); repeatable: a batch")
      ->allow_extra_args(false);
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "prompt token ids, e.g. 5,17,42; repeatable: a batch")
      ->allow_extra_args(false);
  cmd->add_option("--max-new-tokens", o->max_new_tokens,
                  "tokens to generate per prompt at most (at least 1; a sequence also stops on "
                  "an EOS id of generation_config.json)")
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "sample from softmax(logits / temperature), > 0 (default 1 when sampling)");
  cmd->add_option("--top-k", o->top_k,
                  "sample among the k most likely tokens (0: all); implies sampling");
  cmd->add_option("--top-p", o->top_p,
                  "sample among the most likely tokens whose probabilities sum to >= p, in (0, 1]; "
                  "implies sampling");
  cmd->add_option("--seed", o->seed,
                  "seed of the sampling draws (default 0): the same tokens on any mesh and "
                  "process count; implies sampling");
  cmd->add_flag("--json", o->json,
                "print one JSON object per generated token: {\"step\", [\"sequence\",] \"token\", "
                "\"logprob\"[, \"text\"]}");
  cmd->callback([o, exit_code] { *exit_code = run_generate(*o, std::cout); });
}

}  // namespace meshlayout::cli
