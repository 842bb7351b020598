#include "meshlayout/cli/plan_command.h"

#include <fmt/format.h>

#include <cctype>
#include <filesystem>
#include <iostream>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama_split_notes.h"
#include "meshlayout/plan/memory_plan.h"
#include "meshlayout/plan/output_file.h"
#include "meshlayout/plan/plan_html.h"
#include "meshlayout/plan/plan_render.h"
#include "meshlayout/plan/training_plan.h"

namespace meshlayout::cli {

int run_plan(const PlanCommandOptions& options, std::ostream& out) {
  // An unknown optimizer is refused before anything is read.
  std::unique_ptr<Optimizer> optimizer;
  if (options.optimizer) {
    optimizer =
        make_optimizer(*options.optimizer, {.name = stable_optimizer_name(*options.optimizer)});
  }
  if ((options.zero1 || options.shard_slots_over) && !optimizer) {
    throw ValueError(fmt::format("{} shards optimizer slots: give --optimizer ({}) too",
                                 options.zero1 ? "--zero1" : "--shard-slots-over",
                                 join(optimizer_names(), ", ")));
  }
  if (options.zero1 && options.shard_slots_over) {
    throw ValueError(fmt::format(
        "--zero1 (the data axis) and --shard-slots-over {} both choose the axis; give one",
        quote(*options.shard_slots_over)));
  }
  // The memory plan's options are checked before anything is read too.
  const Recompute recompute = parse_recompute(options.recompute);
  const std::optional<uint64_t> device_memory =
      options.device_memory
          ? std::optional(parse_byte_count(*options.device_memory, "--device-memory"))
          : std::nullopt;
  RulesFile rules = load_rules_file(options.rules_path);
  if (options.mesh) rules.mesh = DeviceMesh::from_string(*options.mesh);
  if (!rules.mesh) {
    throw ValueError(fmt::format(
        "no mesh to plan on: rules file {} has no \"mesh\" and no --mesh was given; give one, "
        "for example --mesh data=2,model=4",
        quote(options.rules_path)));
  }
  if (optimizer && (options.zero1 || options.shard_slots_over)) {
    // ZeRO-1: over the data axis, the first of the mesh (ModelParallel's batch_dim_name).
    optimizer = make_optimizer(
        *options.optimizer,
        {.name = optimizer->name(),
         .shard_slots_over = options.shard_slots_over.value_or(rules.mesh->axis_names().front())});
    optimizer->check_shard_slots_over(*rules.mesh);
  }
  std::optional<MatchMode> mode;
  if (options.mode) mode = parse_match_mode(*options.mode);
  const LayoutMap map = rules.to_layout_map(mode);
  const PlanOptions plan_options{.strict = options.strict,
                                 .replicated_warn_bytes = options.replicated_warn_bytes};
  if (options.names != "auto" && options.names != "keras" && options.names != "file") {
    throw ValueError(
        fmt::format("--names {} is not one of auto, keras, file", quote(options.names)));
  }
  std::error_code ec;
  const bool llama_dir =
      std::filesystem::is_directory(options.path, ec) &&
      std::filesystem::exists(std::filesystem::path(options.path) / "config.json", ec);
  if (options.names == "keras" && !llama_dir) {
    throw ValueError(fmt::format(
        "--names keras plans a Hugging Face Llama directory (config.json and its weights) "
        "by its Keras variable paths; {} is not one",
        quote(options.path)));
  }
  std::optional<Checkpoint> checkpoint;
  std::vector<TensorInfo> variables;
  std::optional<LlamaConfig> config;  // a model directory's: the activations' shapes
  const auto make_plan = [&]() -> CheckpointPlan {
    if (llama_dir && options.names != "file") {
      // The paths generate and train match the same rules against (a plan by Hugging Face
      // names showed every tensor of train's rules file replicated).
      const HfLlamaCheckpoint llama = HfLlamaCheckpoint::open(options.path);
      variables = keras_variable_infos(llama);
      config = llama.config();
      std::vector<const TensorInfo*> pointers;
      for (const TensorInfo& t : variables) pointers.push_back(&t);
      CheckpointPlan p = plan_tensors(pointers, map, plan_options);
      p.source = options.path;
      p.num_files = llama.checkpoint().files().size();
      // What the model's forward does with the splits it cannot honour exactly.
      for (std::string& note : llama_split_notes(llama.config(), map)) {
        p.add_issue(PlanIssue{.severity = PlanIssue::Severity::kWarning,
                              .kind = PlanIssue::Kind::kModelSplit,
                              .message = std::move(note)});
      }
      return p;
    }
    checkpoint = Checkpoint::open(options.path);
    return plan_checkpoint(*checkpoint, map, plan_options, options.path);
  };
  const CheckpointPlan plan = make_plan();
  std::string text = options.json ? render_plan_json(plan) : render_plan_text(plan);
  PlanHtmlOptions html;  // --html: what the page's bar chart draws per device, by kind
  if (optimizer) {
    const TrainingPlan training = plan_training(plan, map, *optimizer);
    html.memory = memory_from_training(training);
    html.notes.push_back(fmt::format(
        "training with {}{}: weights, gradients and slots in float32", training.optimizer,
        training.zero1_axis ? ", ZeRO-1 over " + *training.zero1_axis : std::string()));
    if (options.json) {
      nlohmann::json j = nlohmann::json::parse(text);
      j["training"] = training_json(training, plan.mesh);
      text = j.dump() + "\n";
    } else {
      text += render_training_text(training, plan.mesh);
    }
  }
  bool fits = true;
  if (options.batch > 0 || options.seq > 0 || options.cache_length > 0 || device_memory) {
    const MemoryPlan memory =
        plan_memory(plan, map,
                    {.optimizer = optimizer.get(),
                     .batch = options.batch,
                     .seq = options.seq,
                     .cache_length = options.cache_length,
                     .recompute = recompute,
                     .shapes = config ? std::optional(decoder_shapes(*config)) : std::nullopt,
                     .device_memory = device_memory});
    for (const DeviceMemoryPlan& d : memory.devices) fits = fits && d.fits;
    html.memory = memory.devices;  // --html: every kind, each peak, the device memory
    html.device_memory = device_memory;
    html.notes.insert(html.notes.end(), memory.notes.begin(), memory.notes.end());
    if (options.json) {
      nlohmann::json j = nlohmann::json::parse(text);
      j["memory"] = memory_json(memory, plan.mesh);
      text = j.dump() + "\n";
    } else {
      text += render_memory_text(memory, plan.mesh);
    }
  }
  if (options.html) {  // written before printing: a path it cannot write fails the command
    write_output_file(*options.html, render_plan_html(plan, html), "--html");
    if (!options.json) text += fmt::format("picture: {}\n", *options.html);
  }
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  return !plan.ok() ? kPlanHasErrorsExitCode : fits ? 0 : kPlanDoesNotFitExitCode;
}

void add_plan_command(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<PlanCommandOptions>();
  auto warn_bytes = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Show where each tensor of a safetensors checkpoint would go on a mesh under a rules "
      "file, and the bytes per device; reads the header(s) only.");
  cmd->footer(
      "Per tensor: rule, layout, largest shard and its bytes. Warnings: rules that match "
      "nothing, uneven splits, large tensors no rule matches, and for a Hugging Face model "
      "directory every split its forward cannot honour exactly (heads, key/value heads, "
      "head_dim, vocabulary, feed-forward width) with what meshlayout does instead. Errors (exit "
      "code 2, the plan is "
      "still printed): ambiguous paths, layouts of the wrong rank, uneven splits with --strict.");
  cmd->add_option("file", options->path,
                  "a .safetensors file, a *.safetensors.index.json, or a directory holding "
                  "model.safetensors.index.json or model.safetensors")
      ->required();
  cmd->add_option("--rules", options->rules_path, "JSON rules file")->required();
  cmd->add_option("--mesh", options->mesh,
                  "target mesh, e.g. data=2,model=4; overrides the rules file's \"mesh\"");
  cmd->add_option("--mode", options->mode,
                  "search (default; Keras 3.0-3.13), fullmatch (Keras >= 3.14) or first "
                  "(Keras 2); overrides the file's \"mode\"");
  cmd->add_flag("--json", options->json, "print one JSON object instead of text");
  cmd->add_flag("--strict", options->strict, "uneven splits are errors, not warnings");
  cmd->add_option("--optimizer", options->optimizer,
                  "also show what training with this optimizer (" + join(optimizer_names(), ", ") +
                      ") holds per device: "
                      "weights, gradients and optimizer slots, in float32");
  cmd->add_flag(
      "--zero1", options->zero1,
      "with --optimizer: ZeRO-1, each optimizer slot sharded further over the data axis (the "
      "mesh's "
      "first axis), so a device holds 1/data-size of the slots of data-replicated weights");
  cmd->add_option("--shard-slots-over", options->shard_slots_over,
                  "with --optimizer: ZeRO-1 over this mesh axis instead of the first");
  cmd->add_option(
         "--names", options->names,
         "names the rules match: auto (default: a Hugging Face Llama directory by its Keras "
         "variable "
         "paths, as generate and train; other checkpoints by their tensor names), keras, or file")
      ->default_str("auto");
  cmd->add_option("--batch", options->batch,
                  "memory plan: rows of a training step (with --seq and --optimizer: its "
                  "activations per device), or of the key/value cache");
  cmd->add_option("--seq", options->seq, "memory plan: sequence length of a training step");
  cmd->add_option("--recompute", options->recompute,
                  "memory plan: what the backward recomputes: none, attention (default: the "
                  "Llama's own backward) or block")
      ->default_str("attention");
  cmd->add_option("--cache-length", options->cache_length,
                  "memory plan: generation's key/value cache of this many positions (prompt + "
                  "new tokens) for --batch rows");
  cmd->add_option("--device-memory", options->device_memory,
                  "memory plan: each device's memory, e.g. 80GiB; a peak above it says NO and "
                  "exits 3");
  cmd->add_option("--replicated-warn-bytes", *warn_bytes,
                  "warn about tensors of at least this size that no rule matches (each device "
                  "holds all of them); 0 turns the warning off. Default 16MiB");
  cmd->add_option("--html", options->html,
                  "also write the plan as one self-contained HTML page: per layout the tensor "
                  "cut into boxes and the mesh showing which box each device holds, each "
                  "device's bytes by kind, the warnings");
  cmd->callback([options, warn_bytes, exit_code] {
    if (!warn_bytes->empty()) {
      options->replicated_warn_bytes = parse_byte_count(*warn_bytes, "--replicated-warn-bytes");
    }
    // Planning only: the mesh describes the target machine, no device of it is used here.
    set_device_count(kMaxMeshDevices);
    *exit_code = run_plan(*options, std::cout);
  });
}

}  // namespace meshlayout::cli
