#include "meshlayout/cli/demo_command.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "meshlayout/cli/demo_model.h"
#include "meshlayout/cli/progress_bar.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/layout_grid.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_split_notes.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/plan/checkpoint_plan.h"
#include "meshlayout/plan/plan_render.h"
#include "meshlayout/plan/text_format.h"
#include "meshlayout/tokenizers/toy_tokenizer.h"

namespace meshlayout::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 2, kPromptLength = 8, kNewTokens = 8;

// The demo's prompts: kBatch rows of kPromptLength token ids below the vocabulary.
std::vector<std::vector<int32_t>> demo_prompts(const LlamaConfig& c) {
  std::vector<std::vector<int32_t>> prompts(kBatch);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t t = 0; t < kPromptLength; ++t) {
      prompts[static_cast<size_t>(b)].push_back(
          static_cast<int32_t>((b * 131 + t * 37 + 11) % c.vocab_size));
    }
  }
  return prompts;
}

// Logits (batch, prompt, vocab) of the prompts, the tokens split over the mesh's first axis.
HostTensor prompt_logits(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts) {
  HostTensor tokens(DType::kI32, {kBatch, kPromptLength});
  for (int64_t b = 0; b < kBatch; ++b) {
    std::copy(prompts[static_cast<size_t>(b)].begin(), prompts[static_cast<size_t>(b)].end(),
              tokens.data_as<int32_t>() + b * kPromptLength);
  }
  const std::string& first_axis = model.mesh().axis_names().front();
  return model.logits(distribute_tensor(tokens, TensorLayout({first_axis, None}, model.mesh())))
      .gather();
}

// max |a - b| / max |b|: the relative error of logits a against the reference b.
double relative_difference(const HostTensor& a, const HostTensor& b) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double x = a.data_as<float>()[i], y = b.data_as<float>()[i];
    worst = std::max(worst, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return scale > 0 ? worst / scale : worst;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The --keep directory must be new or empty: the demo writes llama/ and llama.safetensors into
// it and must not replace anything the user had.
void check_keep_dir(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;  // created later
  if (!S_ISDIR(st.st_mode)) {
    throw ValueError(
        fmt::format("--keep {}: it exists and is {}, not a directory (give a new or empty "
                    "directory)",
                    quote(dir.string()), file_kind(st.st_mode)));
  }
  if (!fs::is_empty(dir)) {
    throw ValueError(
        fmt::format("--keep {}: the directory is not empty; the demo writes llama/ and "
                    "llama.safetensors into a new or empty directory so it replaces nothing",
                    quote(dir.string())));
  }
}

// Removes a directory when it goes out of scope (the demo's temporary one, on success or error).
struct RemoveOnExit {
  fs::path dir;
  ~RemoveOnExit() {
    std::error_code ignored;
    if (!dir.empty()) fs::remove_all(dir, ignored);
  }
};

std::string tokens_per_second(int64_t tokens, double seconds) {
  return seconds > 0 ? fmt::format("{:.0f} tokens/s", static_cast<double>(tokens) / seconds) : "-";
}

}  // namespace

int run_demo(std::ostream& out, const DemoOptions& options) {
  const std::vector<std::string> devices = list_devices();
  out << fmt::format("devices: {} virtual CPU devices ({} … {})\n\n", devices.size(),
                     devices.front(), devices.back());
  if (devices.size() < 8) {
    out << fmt::format("the demo needs 8 devices; set {}=8 or more\n", kCpuDevicesEnvVar);
    return 1;
  }
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    out << fmt::format("   check: {}: {}\n", what, ok ? "ok" : "FAILED");
    if (!ok) ++failures;
  };
  const LlamaConfig config = demo_llama_config(options.family);
  const DeviceMesh mesh({2, 4}, {"batch", "model"},
                        std::vector<std::string>(devices.begin(), devices.begin() + 8));
  out << "1. A 2x4 mesh of virtual devices: " << mesh << "\n\n";

  const bool keep = !options.keep_dir.empty();
  if (keep) check_keep_dir(options.keep_dir);
  const fs::path dir =
      keep ? fs::path(options.keep_dir)
           : fs::temp_directory_path() / fmt::format("meshlayout-demo-{}", ::getpid());
  const RemoveOnExit cleanup{keep ? fs::path() : dir};
  const fs::path model_dir = dir / (config.family == "llama" ? "llama" : config.family);
  out << fmt::format("2. A small random {} written in Hugging Face format to {}\n",
                     demo_family_story(config), model_dir.string());
  out << fmt::format(
      "   vocab {}, hidden {}, {} layers, {} query heads sharing {} key/value heads of {}, "
      "feed-forward {}, {} embeddings; BF16 in 2 files with an index; a toy byte-level "
      "tokenizer.json (try: meshlayout generate --model DIR --prompt \"the cat\")\n",
      config.vocab_size, config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
      config.num_key_value_heads, config.head_dim, config.intermediate_size,
      config.tie_word_embeddings ? "tied" : "untied");
  clear_session();
  write_random_hf_llama(model_dir.string(), config,
                        {.kernel_scale = 8, .file_dtype = DType::kBF16, .num_shards = 2});
  // A toy byte-level tokenizer of the same vocabulary, so that `meshlayout generate --model
  // DIR --prompt "text"` runs on the kept directory.
  if (default_runtime()->process_id() == 0) {
    tokenizers::write_toy_tokenizer(model_dir.string(), config.vocab_size);
  }
  const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(model_dir.string());
  uint64_t file_bytes = 0;
  for (const auto& f : checkpoint.checkpoint().files()) file_bytes += fs::file_size(f->path());
  out << fmt::format("   {} tensors in {} files, {}\n", checkpoint.mappings().size(),
                     checkpoint.checkpoint().files().size(), format_bytes(file_bytes));

  const LayoutMap rules = family_layout_map(config, mesh, "model", "batch");
  out << fmt::format(
      "\n3. keras-hub's {}Backbone.get_layout_map(mesh, \"model\", \"batch\"): {} rules, "
      "keyed by variable path (search mode, as Keras 3):\n",
      demo_backbone_name(config), rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    out << fmt::format("   [{}] {:<60} -> {}\n", i, rules.rule(i).pattern,
                       rules.rule(i).layout.to_string());
  }

  out << "\n4. The plan, from the checkpoint's headers alone (nothing read or allocated yet; "
         "`meshlayout plan` does this for any checkpoint):\n";
  const std::vector<TensorInfo> specs = keras_variable_infos(checkpoint);
  std::vector<const TensorInfo*> spec_ptrs;
  for (const TensorInfo& t : specs) spec_ptrs.push_back(&t);
  const CheckpointPlan plan = plan_tensors(spec_ptrs, rules);
  out << render_plan_text(plan);

  // A dense feed-forward kernel, or a sparse layer's router (d, experts).
  const int64_t last = config.num_hidden_layers - 1;
  const std::string gate =
      config.gemma() ? "decoder_block_0/ffw_gating/kernel"
      : config.sparse_layer(last)
          ? fmt::format("transformer_layer_{}/{}/sparse_feedforward_gate_dense/kernel", last,
                        config.sparse_block_name(last))
          : "transformer_layer_0/feedforward_gate_dense/kernel";
  const int64_t columns = config.sparse_layer(last) ? config.num_experts : config.intermediate_size;
  out << fmt::format("\n5. How {} ({}, {}) is cut:\n", gate, config.hidden_size, columns);
  out << render_layout_grid(ShardGeometry(*rules.get(gate), {config.hidden_size, columns}));

  out << "\n6. Build the model sharded and load the checkpoint: each device reads only the bytes "
         "of its "
         "own box, transposed and converted to F32 on the way\n";
  clear_session();
  auto start = Clock::now();
  LlamaModel model(config, rules);
  std::vector<VirtualDevice*> local = default_runtime()->local_devices();
  for (VirtualDevice* d : local) d->memory().reset_peak();
  // Staging for the transposed, converted pieces: at most 16 KiB per device at a time (larger
  // boxes are read in pieces; the default is 64 MiB, enough that small models load in one go).
  const uint64_t staging_budget = uint64_t{16} << 10;
  const HfLoadReport loaded =
      load_hf_llama(checkpoint, model.variables_by_path(), {.max_piece_bytes = staging_budget});
  out << fmt::format(
      "   {} variables built and loaded in {:.1f} ms; read {} of its boxes' {} (ratio {:.3f})\n",
      loaded.tensors_loaded, ms_since(start), format_bytes(loaded.bytes_read),
      format_bytes(loaded.box_bytes),
      loaded.box_bytes
          ? static_cast<double>(loaded.bytes_read) / static_cast<double>(loaded.box_bytes)
          : 0.0);
  bool layouts_match = true;
  for (const VariablePtr& v : model.variables()) {
    const std::optional<TensorLayout> planned = rules.get(v->path());
    const TensorLayout want =
        planned ? *planned : TensorLayout::replicated(static_cast<int>(v->shape().size()), mesh);
    if (v->layout() != want) {
      out << fmt::format("   {} has {}, the plan said {}\n", v->describe(),
                         v->layout()->to_string(), want.to_string());
      layouts_match = false;
    }
  }
  check(layouts_match && model.variables().size() == specs.size(),
        "every variable has the layout the plan gave it");
  out << "   bytes each device holds (the whole model is " << format_bytes(plan.total_bytes)
      << "):\n  ";
  bool memory_as_planned = true, peak_bounded = true;
  for (size_t p = 0; p < 8; ++p) {
    const MemoryStats s = local[p]->memory().stats();
    out << fmt::format(" {}={}", local[p]->name(),
                       format_bytes(static_cast<uint64_t>(s.bytes_live)));
    memory_as_planned =
        memory_as_planned && static_cast<uint64_t>(s.bytes_live) == plan.device_bytes[p];
    peak_bounded =
        peak_bounded && static_cast<uint64_t>(s.peak_bytes - s.bytes_live) <= staging_budget;
  }
  out << "\n";
  check(memory_as_planned, "each device holds exactly the bytes the plan predicted");
  check(peak_bounded,
        fmt::format("each device's peak while loading was its shards plus at most one piece in "
                    "flight (staging budget {}, largest piece {})",
                    format_bytes(staging_budget), format_bytes(loaded.max_piece_bytes)));
  check(loaded.bytes_read <= loaded.box_bytes + loaded.box_bytes / 10,
        "the process read at most 1.1x the bytes of its devices' boxes");

  const std::vector<std::vector<int32_t>> prompts = demo_prompts(config);
  out << fmt::format(
      "\n7. Generate greedily on the 8 devices, a key/value cache sharded like the heads: "
      "{} prompts of {} tokens, {} new tokens each\n",
      kBatch, kPromptLength, kNewTokens);
  const GenerateResult sharded = generate(model, prompts, {.max_new_tokens = kNewTokens});
  for (size_t b = 0; b < prompts.size(); ++b) {
    out << fmt::format("   prompt {} -> {}\n", join_ids(prompts[b]), join_ids(sharded.tokens[b]));
  }
  out << fmt::format("   prefill {}, decode {}\n",
                     tokens_per_second(sharded.prefill_tokens, sharded.prefill_seconds),
                     tokens_per_second(sharded.decode_tokens, sharded.decode_seconds));
  start = Clock::now();
  const HostTensor logits = prompt_logits(model, prompts);
  out << fmt::format("   forward pass of the prompts on 8 devices: {:.1f} ms\n", ms_since(start));

  out << "\n8. Check against one device: the same checkpoint loaded on cpu:0 alone\n";
  const DeviceMesh single({1}, {"single"}, std::vector<std::string>{devices.front()});
  HostTensor want_logits;
  GenerateResult reference;
  {
    LlamaModel one(config, LayoutMap(single));
    load_hf_llama(checkpoint, one.variables_by_path());
    start = Clock::now();
    want_logits = prompt_logits(one, prompts);
    out << fmt::format("   forward pass on 1 device: {:.1f} ms\n", ms_since(start));
    reference = generate(one, prompts, {.max_new_tokens = kNewTokens});
  }
  const double diff = relative_difference(logits, want_logits);
  check(diff <= 1e-4,
        fmt::format("8-device logits equal the 1-device logits (relative difference {:.2e}, "
                    "tolerance 1e-4)",
                    diff));
  check(sharded.tokens == reference.tokens, "the greedy tokens are the same on 8 devices and on 1");

  const fs::path keras_file = dir / "llama.safetensors";
  out << "\n9. Save the loaded model shard by shard under its Keras paths to "
      << keras_file.string() << "\n";
  std::vector<NamedArray> named;
  for (const auto& [path, array] : model.variables_by_path()) named.push_back({path, array});
  start = Clock::now();
  ProgressBar save_bar(std::cerr, "saving", options.progress);
  const SaveReport saved =
      save_arrays(keras_file.string(), named,
                  {.metadata = {{"format", "keras-hub"}}, .progress = save_bar.callback()});
  save_bar.finish();
  out << fmt::format("   {} written in {:.1f} ms\n", format_bytes(saved.file_bytes),
                     ms_since(start));

  const LayoutMap megatron = demo_megatron_rules(mesh, config);
  out << (config.moe() ? "\n10. Reload it into another sharding, expert parallelism (each device "
                         "of the model axis holds its experts; the tokens they route are "
                         "combined across it) with Megatron's attention:\n"
                       : "\n10. Reload it into another sharding, Megatron's tensor parallelism "
                         "(examples/rules/llama_megatron.json):\n");
  const CheckpointPlan megatron_plan = plan_tensors(spec_ptrs, megatron);
  for (const PlanIssue& issue : megatron_plan.issues) {
    out << fmt::format("   plan {}: {}\n", plan_issue_kind_name(issue.kind), issue.message);
  }
  for (const std::string& note : llama_split_notes(config, megatron)) {
    out << fmt::format("   plan model_split: {}\n", note);
  }
  {
    LlamaModel resharded(config, megatron);
    std::vector<LoadTarget> targets;
    for (const auto& [path, array] : resharded.variables_by_path())
      targets.push_back({path, array});
    const Checkpoint keras_checkpoint = Checkpoint::open(keras_file.string());
    start = Clock::now();
    const LoadReport reloaded = load_arrays(keras_checkpoint, targets);
    out << fmt::format(
        "   {} variables loaded in {:.1f} ms, reading {} (each distinct shard once)\n",
        targets.size(), ms_since(start), format_bytes(reloaded.bytes_read));
    const double diff2 = relative_difference(prompt_logits(resharded, prompts), want_logits);
    check(diff2 <= 1e-4,
          fmt::format("its logits equal the 1-device logits (relative difference {:.2e})", diff2));
    const GenerateResult again = generate(resharded, prompts, {.max_new_tokens = kNewTokens});
    check(again.tokens == reference.tokens, "so do its greedy tokens");
  }

  out << "\n11. Rules that match none of the model's variables (usually a typo or a renamed "
         "layer):\n";
  std::vector<std::string> paths;
  for (const TensorInfo& t : specs) paths.push_back(t.name);
  for (const auto& [name, map] :
       {std::pair{"keras-hub", &rules}, std::pair{"Megatron", &megatron}}) {
    const std::vector<size_t> unused = map->unused_rules(paths);
    if (unused.empty()) out << fmt::format("   {}: every rule matches a variable\n", name);
    for (size_t i : unused) {
      out << fmt::format("   {}: rule {} '{}' matches nothing\n", name, i, map->rule(i).pattern);
    }
  }
  out << (failures == 0 ? "\nall checks passed\n" : fmt::format("\n{} checks FAILED\n", failures));
  return failures == 0 ? 0 : 1;
}

void add_demo_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "The main job: a small random Llama written in Hugging Face format, planned and loaded "
      "sharded under keras-hub's rules on a 2x4 mesh of virtual devices, generating text, "
      "checked against one device, saved and reloaded into Megatron's sharding.");
  auto options = std::make_shared<DemoOptions>();
  options->progress = stderr_is_terminal();
  cmd->add_option(
         "--family", options->family,
         "The model family: llama (default), mistral (sliding window), qwen2 (q/k/v "
         "biases), qwen3 (q/k head norms), gemma, gemma2 (post norms, soft caps) or "
         "gemma3_text (q/k norms, local and global ropes), mixtral, qwen3_moe or qwen2_moe "
         "(mixtures of experts, Qwen 2's with a shared expert, reloaded with expert "
         "parallelism); its "
         "Hugging Face format and keras-hub rules")
      ->check(CLI::IsMember({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                             "mixtral", "qwen3_moe", "qwen2_moe"}));
  cmd->add_option("--keep", options->keep_dir,
                  "Write the model and the checkpoint into this directory and keep them "
                  "(default: a temporary directory, removed)");
  cmd->add_flag(
      "--no-progress", [options](int64_t) { options->progress = false; },
      "No progress bars (they are drawn only when stderr is a terminal)");
  cmd->callback([exit_code, options] { *exit_code = run_demo(std::cout, *options); });
}

}  // namespace meshlayout::cli
