#include "meshlayout/cli/chat_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "meshlayout/cli/command_agreement.h"
#include "meshlayout/cli/generate_command.h"
#include "meshlayout/cli/llama_command_setup.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/plan/text_format.h"
#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/tokenizers/chat_template.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::cli {
namespace {

using tokenizers::ChatFormat;
using tokenizers::ChatMessage;

// Process 0 reads the next line of `in` and sends it to the others; false at the end of input.
bool next_line(Runtime& runtime, std::istream& in, std::string& line) {
  int64_t size = -1;
  if (runtime.process_id() == 0 && std::getline(in, line)) {
    if (line.ends_with('\r')) line.pop_back();
    size = static_cast<int64_t>(line.size());
  }
  runtime.comm().broadcast(&size, sizeof(size), 0);
  if (size < 0) return false;
  line.resize(static_cast<size_t>(size));
  if (size > 0) runtime.comm().broadcast(line.data(), line.size(), 0);
  return true;
}

std::string json_text(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

int run_chat(const ChatCommandOptions& options, std::istream& in, std::ostream& out,
             std::ostream& log) {
  const std::shared_ptr<Runtime> runtime = default_runtime();
  const bool leader = runtime->process_id() == 0;

  // Every process checks the options, opens the checkpoint (headers only) and the tokenizer;
  // all fail together if one does (command_agreement.h).
  std::unique_ptr<tokenizers::Tokenizer> tokenizer;
  GenerateOptions decoding;
  ChatFormat format = ChatFormat::kNone;
  LlamaSetup setup;
  std::vector<std::string> resolved;
  std::exception_ptr failure;
  std::shared_ptr<Runtime> device_runtime = runtime;
  try {
    if (options.model_dir.empty()) {
      throw ValueError(
          "--model is required: a Hugging Face directory (config.json, model.safetensors and "
          "tokenizer.json or tokenizer.model)");
    }
    decoding = decoding_options(options.max_new_tokens, options.temperature, options.top_k,
                                options.top_p, options.seed);
    GenerationSetup opened =
        open_generation_setup(options.model_dir, options.rules_path, options.mesh, options.device);
    setup = std::move(opened.llama);
    device_runtime = std::move(opened.device_runtime);
    tokenizer = tokenizers::load_tokenizer(options.model_dir);
    format = tokenizers::choose_chat_format(options.template_name,
                                            setup.checkpoint->config().family, *tokenizer);
    decoding.eos_token_ids = read_eos_token_ids(options.model_dir);
    for (const int64_t id : tokenizers::chat_stop_ids(*tokenizer, format)) {
      if (std::find(decoding.eos_token_ids.begin(), decoding.eos_token_ids.end(), id) ==
          decoding.eos_token_ids.end()) {
        decoding.eos_token_ids.push_back(id);
      }
    }
    resolved = {fmt::format("mesh={}", setup.mesh->to_string()),
                fmt::format("template={}", tokenizers::chat_format_name(format)),
                fmt::format("local devices per process={}", device_runtime->local_device_count())};
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_command(*runtime, "the chat command", std::move(resolved), setup.inputs, failure);
  const LlamaConfig& config = setup.checkpoint->config();
  const std::unique_ptr<LlamaModel> model = build_llama_agreed(*runtime, config, *setup.rules);
  load_hf_llama(*setup.checkpoint, model->variables_by_path());

  if (leader) {
    std::vector<std::string> stops;
    for (const int64_t id : decoding.eos_token_ids) {
      stops.push_back(fmt::format("{} (id {})", quote(tokenizer->id_to_token(id)), id));
    }
    log << fmt::format("model: {} ({}: vocab {}, hidden {}, {} layers, context window {})\n",
                       quote(options.model_dir), config.family, config.vocab_size,
                       config.hidden_size, config.num_hidden_layers, config.max_position_embeddings)
        << fmt::format("mesh: {} ({} process{})\n", model->mesh().to_string(),
                       runtime->num_processes(), runtime->num_processes() == 1 ? "" : "es")
        << "rules: " << setup.rules_text << "\n"
        << "tokenizer: " << tokenizer->describe() << "\n"
        << fmt::format("template: {}; a reply stops on {}or after {} new tokens\n",
                       tokenizers::chat_format_name(format),
                       stops.empty() ? "" : join(stops, ", ") + " ", options.max_new_tokens)
        << "each turn recomputes the whole conversation (no key/value cache kept between "
           "turns); one line per message, end of input ends the chat\n"
        << std::flush;
  }

  std::vector<ChatMessage> messages;
  if (options.system) messages.push_back({"system", *options.system});
  std::string line;
  for (int64_t turn = 0; next_line(*runtime, in, line);) {
    if (trim(line).empty()) continue;
    messages.push_back({"user", line});
    const std::vector<int64_t> ids = tokenizers::encode_chat(*tokenizer, format, messages);
    const int64_t window = config.max_position_embeddings;
    if (static_cast<int64_t>(ids.size()) >= window) {
      throw ValueError(fmt::format(
          "chat turn {}: the conversation is {} tokens, which leaves no room for a reply in the "
          "context window of {} tokens (max_position_embeddings); start a new chat",
          turn, ids.size(), window));
    }
    std::vector<int32_t> prompt(ids.begin(), ids.end());  // ids < vocab: checked by generate
    GenerateOptions g = decoding;
    g.seed = decoding.seed + static_cast<uint64_t>(turn);  // turn t draws with seed + t
    g.max_new_tokens = std::min<int64_t>(decoding.max_new_tokens, window - prompt.size());
    if (leader && options.print_prompt) {
      log << fmt::format("turn {} prompt ({} tokens): {}\n", turn, ids.size(), join_ids(prompt))
          << fmt::format("turn {} prompt text: {}\n", turn,
                         json_text(tokenizer->decode(ids, false)))
          << std::flush;
    }
    TokenTextStream stream(*tokenizer);
    if (leader) {
      g.on_token = [&](int64_t, int64_t, int32_t token, double) {
        out << stream.push(token) << std::flush;
      };
    }
    const GenerateResult result = generate(*model, {prompt}, g);
    std::vector<int64_t> reply(result.tokens[0].begin(), result.tokens[0].end());
    if (result.stopped_on_eos[0]) reply.pop_back();  // the end-of-turn token is not content
    if (leader) {
      out << stream.finish() << "\n" << std::flush;
      if (options.print_prompt) {
        log << fmt::format("turn {} reply ({} tokens{}): {}\n", turn, reply.size(),
                           result.stopped_on_eos[0]
                               ? fmt::format(", stopped on id {}", result.tokens[0].back())
                               : "",
                           join_ids(result.tokens[0]))
            << std::flush;
      }
    }
    messages.push_back({"assistant", tokenizer->decode(reply, /*skip_special_tokens=*/true)});
    ++turn;
  }
  return 0;
}

void add_chat_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ChatCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "chat",
      "A plain chat with a Hugging Face checkpoint sharded on a mesh: one user message per line "
      "of standard input, each reply streamed to standard output. The conversation is formatted "
      "in the model's chat format (chatml for Qwen, llama3, mistral [INST] for Mistral/Llama 2, "
      "gemma; Jinja templates are not run) and recomputed whole every turn (no key/value cache "
      "is kept between turns: simple and exact, slower for long chats). The header goes to "
      "stderr.");
  cmd->add_option("--model", o->model_dir,
                  "Hugging Face directory: config.json, model.safetensors (or a sharded index) "
                  "and tokenizer.json or tokenizer.model")
      ->required();
  cmd->add_option("--rules", o->rules_path,
                  "JSON rules file (e.g. examples/rules/llama_megatron.json); default: every "
                  "variable replicated");
  cmd->add_option("--mesh", o->mesh,
                  "mesh, e.g. batch=1,model=4; default: the rules file's \"mesh\", else "
                  "batch=1,model=<all devices>");
  cmd->add_option("--device", o->device, "devices to shard on: cpu (the default) or gpu");
  cmd->add_option("--template", o->template_name,
                  "chat format: chatml, llama3, mistral, gemma or none (the lines as plain text "
                  "with the tokenizer's BOS); default: by the model's family and the tokenizer's "
                  "special tokens");
  cmd->add_option("--system", o->system, "a system message opening the conversation");
  cmd->add_option("--max-new-tokens", o->max_new_tokens,
                  "tokens per reply at most (a reply also stops on the format's end-of-turn "
                  "token or an EOS id of generation_config.json, and where the context window "
                  "ends)")
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "sample from softmax(logits / temperature), > 0; implies sampling");
  cmd->add_option("--top-k", o->top_k, "sample among the k most likely tokens; implies sampling");
  cmd->add_option("--top-p", o->top_p, "nucleus sampling, p in (0, 1]; implies sampling");
  cmd->add_option("--seed", o->seed,
                  "seed of the sampling draws (default 0; turn t uses seed + t): the same replies "
                  "on any mesh and process count; implies sampling");
  cmd->add_flag("--print-prompt", o->print_prompt,
                "log (stderr) each turn's prompt ids and text and the reply's ids");
  cmd->callback([o, exit_code] { *exit_code = run_chat(*o, std::cin, std::cout, std::cerr); });
}

}  // namespace meshlayout::cli
