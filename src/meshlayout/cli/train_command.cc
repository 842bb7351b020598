// train_command.cc — see train_command.h.
#include "meshlayout/cli/train_command.h"

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "meshlayout/cli/command_agreement.h"
#include "meshlayout/cli/llama_command_setup.h"
#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/save_directory.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/train/training_state.h"

namespace meshlayout::cli {
namespace {

namespace fs = std::filesystem;

// batch=<all devices>,model=1: pure data parallel, and both axis names keras-hub's rules use exist.
DeviceMesh default_train_mesh() {
  const std::vector<std::string> devices = list_devices();
  return DeviceMesh({static_cast<int64_t>(devices.size()), 1}, {"batch", "model"}, devices);
}

// The model's files in a training state: the Hugging Face directory of the trained Llama.
ModelFiles llama_files(LlamaModel& model, const LlamaConfig& config) {
  return {.names = {"config.json", "model.safetensors"},
          .write = [&model, &config](const std::string& dir) {
            std::map<std::string, const Array*> weights;
            for (const auto& [path, array] : model.variables_by_path()) weights[path] = array;
            save_hf_llama(dir, config, weights);
          }};
}

nlohmann::json run_fields(int64_t steps_run) { return {{"steps_this_run", steps_run}}; }

}  // namespace

int run_train(const TrainCommandOptions& options, std::ostream& out) {
  const std::shared_ptr<Runtime> runtime = default_runtime();
  const bool leader = runtime->process_id() == 0;
  LlamaSetup setup;
  std::optional<TokenDataset> data;
  std::unique_ptr<Optimizer> optimizer;
  std::optional<SaveDirectory> save_dir;  // process 0's claim: created and locked before training
  // Until training has finished, a failure gives the claim up (nothing trained, nothing to save).
  bool trained = false;
  const auto abandon_unless_trained = [&](void*) {
    if (!trained && save_dir) save_dir->abandon();
  };
  const std::unique_ptr<void, decltype(abandon_unless_trained)> guard(&trained,
                                                                      abandon_unless_trained);
  std::vector<std::string> resolved;
  std::exception_ptr failure;
  try {
    if (options.data_path.empty()) {
      throw ValueError(
          "--data is required: a safetensors file with one I32 tensor tokens (rows, seq + 1)");
    }
    if (options.batch_size < 1)
      throw ValueError(fmt::format("--batch-size must be at least 1, got {}", options.batch_size));
    if (options.steps < 1)
      throw ValueError(fmt::format("--steps must be at least 1, got {}", options.steps));
    if (options.checkpoint_every < 0 || options.keep_last < 0) {
      throw ValueError(
          fmt::format("--checkpoint-every and --keep-last must be at least 1, got {} and {}",
                      options.checkpoint_every, options.keep_last));
    }
    if ((options.checkpoint_every > 0) != !options.checkpoint_dir.empty() ||
        (options.keep_last > 0 && options.checkpoint_every == 0)) {
      throw ValueError(
          "--checkpoint-every N and --checkpoint-dir DIR go together (a training state every N "
          "steps in DIR/step-<iterations>), and --keep-last K needs them");
    }
    if (!options.checkpoint_dir.empty() && fs::exists(options.checkpoint_dir) &&
        !fs::is_directory(options.checkpoint_dir)) {
      throw ValueError(
          fmt::format("--checkpoint-dir {} is not a directory", quote(options.checkpoint_dir)));
    }
    OptimizerOptions optimizer_options;
    // A fixed name (not Keras 3.15's numbered one): saved state is found by its paths.
    optimizer_options.name = stable_optimizer_name(options.optimizer);
    optimizer_options.learning_rate = options.learning_rate;
    optimizer_options.weight_decay = options.weight_decay;
    optimizer = make_optimizer(options.optimizer, optimizer_options);
    setup =
        open_llama_setup(options.model_dir, options.rules_path, options.mesh, default_train_mesh);
    // An interrupted save is not resumed from: its files may be from different steps.
    // (A plain Hugging Face directory has config.json and weights but no optimizer state.)
    check_save_complete(options.model_dir, std::vector<std::string>{kOptimizerStateFile});
    const fs::path state_path = fs::path(options.model_dir) / kOptimizerStateFile;
    if (fs::exists(state_path)) {
      setup.inputs.add_checkpoint("optimizer state", Checkpoint::open(state_path.string()));
    } else {
      setup.inputs.add_absent("optimizer state");
    }
    data.emplace(TokenDataset::open(options.data_path));
    setup.inputs.add_checkpoint("data", data->checkpoint());
    // A bad --save path is found now, not after the training it would lose.
    if (!options.save_dir.empty() && leader)
      save_dir = SaveDirectory::claim(options.save_dir, "--save", options.model_dir);
    // What the options resolved to; every option as parsed follows (command_agreement.h).
    resolved = {fmt::format("mesh={}", setup.mesh->to_string()),
                fmt::format("learning rate={}", optimizer->learning_rate()),
                fmt::format("weight decay={}", optimizer->weight_decay()
                                                   ? fmt::format("{}", *optimizer->weight_decay())
                                                   : std::string("none")),
                fmt::format("local devices per process={}", runtime->local_device_count())};
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_command(*runtime, "the train command", std::move(resolved), setup.inputs, failure);
  const LlamaConfig& config = setup.checkpoint->config();

  const std::unique_ptr<LlamaModel> built = build_llama_agreed(*runtime, config, *setup.rules);
  LlamaModel& model = *built;
  if (options.zero1) {
    // ZeRO-1 over the batch axis, known once the model has its distribution.
    OptimizerOptions optimizer_options;
    optimizer_options.name = optimizer->name();
    optimizer_options.learning_rate = options.learning_rate;
    optimizer_options.weight_decay = options.weight_decay;
    optimizer_options.shard_slots_over = model.distribution()->batch_dim_name();
    optimizer = make_optimizer(options.optimizer, optimizer_options);
  }
  const HfLoadReport load = load_hf_llama(*setup.checkpoint, model.variables_by_path());
  const std::vector<VariablePtr> variables = model.variables();
  const std::optional<TrainingPosition> position =
      resume_training_state(options.model_dir, *optimizer, variables);
  const bool resumed = position.has_value();
  if (resumed && options.learning_rate) optimizer->set_learning_rate(*options.learning_rate);

  std::ostringstream log;
  if (!options.json) {
    log << fmt::format("model: {} ({})\n", quote(options.model_dir), model_summary(model));
    log << fmt::format("mesh: {} ({} process{} x {} local devices); batch axis {}\n",
                       model.mesh().to_string(), runtime->num_processes(),
                       runtime->num_processes() == 1 ? "" : "es", runtime->local_device_count(),
                       quote(model.distribution()->batch_dim_name()));
    log << "rules: " << setup.rules_text << "\n";
    log << fmt::format("loaded {} tensors ({} read by process 0)\n", load.tensors_loaded,
                       format_bytes(load.bytes_read));
    log << fmt::format("data: {} ({} rows of {} positions); batch {}, {} steps\n",
                       quote(options.data_path), data->rows(), data->sequence_length(),
                       options.batch_size, options.steps);
    log << fmt::format(
        "optimizer: {} (learning rate {}{}{}){}\n", optimizer->name(), optimizer->learning_rate(),
        optimizer->weight_decay() ? fmt::format(", weight decay {}", *optimizer->weight_decay())
                                  : "",
        optimizer->shard_slots_over()
            ? fmt::format("; ZeRO-1: slots sharded over {}", quote(*optimizer->shard_slots_over()))
            : "",
        resumed ? fmt::format("; resumed at iteration {}", optimizer->iterations()) : "");
  }
  LlamaTrainOptions train_options{.batch_size = options.batch_size,
                                  .steps = options.steps,
                                  .first_step = position ? position->next_batch : 0};
  if (options.checkpoint_every > 0) {
    train_options.callbacks.push_back(std::make_shared<TrainingCheckpoint>(
        options.checkpoint_dir, llama_files(model, config),
        TrainingCheckpointOptions{.every_steps = options.checkpoint_every,
                                  .keep_last = options.keep_last}));
  }
  train_options.on_step = [&](int64_t step, double loss) {
    if (options.json) {
      if (leader)
        out << fmt::format("{{\"step\": {}, \"loss\": {}}}\n", step, json_double(loss))
            << std::flush;
    } else {
      log << fmt::format("step {:>4}  loss {:.6f}\n", step, loss);
    }
  };
  const LlamaTrainResult result = train_llama(model, *data, *optimizer, train_options);
  trained = true;
  // Step k trained on batch k: the next run continues at the batch after the last.
  const auto trained_position = [&] {
    return TrainingPosition{.iterations = optimizer->iterations(),
                            .next_batch = train_options.first_step + options.steps};
  };

  if (!options.save_dir.empty()) {
    // The run is finished: a save that fails now (disk full, the directory removed) must not
    // lose it. Every process agrees on the failure, then all save into a new temporary
    // directory that process 0 makes (on one node, or where the temporary folder is shared).
    std::exception_ptr save_failure;
    try {
      write_training_state(options.save_dir, save_dir ? &*save_dir : nullptr,
                           llama_files(model, config), *optimizer, trained_position(),
                           run_fields(options.steps));
    } catch (...) {
      save_failure = std::current_exception();
    }
    std::string save_error;
    try {
      agree_or_rethrow(*runtime, save_failure);
    } catch (const std::exception& e) {
      save_error = e.what();
    }
    if (!save_error.empty()) {
      std::array<char, 4096> fallback{};
      std::exception_ptr fallback_failure;
      try {
        if (leader) {
          const std::string dir = make_fallback_save_dir();
          if (dir.size() >= fallback.size())
            throw ValueError(fmt::format("temporary directory {} is too long", quote(dir)));
          std::copy(dir.begin(), dir.end(), fallback.begin());
        }
      } catch (...) {
        fallback_failure = std::current_exception();
      }
      agree_or_rethrow(*runtime, fallback_failure);
      if (runtime->num_processes() > 1)
        runtime->comm().broadcast(fallback.data(), fallback.size(), 0);
      const std::string dir(fallback.data());
      std::optional<SaveDirectory> claimed;
      std::exception_ptr retry_failure;
      try {
        if (leader) claimed = SaveDirectory::claim(dir, "the fallback save directory");
        write_training_state(dir, claimed ? &*claimed : nullptr, llama_files(model, config),
                             *optimizer, trained_position(), run_fields(options.steps));
      } catch (...) {
        retry_failure = std::current_exception();
      }
      agree_or_rethrow(*runtime, retry_failure);
      throw FailedPreconditionError(
          fmt::format("saving to --save {} failed after training: {}; the trained model and "
                      "optimizer state were saved to {} "
                      "instead (move them where you want them)",
                      quote(options.save_dir), save_error, quote(dir)));
    }
  }
  if (options.json) return 0;
  log << fmt::format(
      "trained {} tokens in {:.3f} s = {:.1f} tokens/s\n", result.tokens, result.seconds,
      result.seconds > 0 ? static_cast<double>(result.tokens) / result.seconds : 0.0);
  if (!options.save_dir.empty()) {
    log << fmt::format("saved the model and the {} optimizer state ({} variables) to {}\n",
                       optimizer->name(), optimizer->variables().size(), quote(options.save_dir));
  }
  log << "memory per device (live now, peak since start):\n" << device_memory_lines(*runtime);
  if (leader) out << log.str() << std::flush;
  return 0;
}

void add_train_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<TrainCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Trains a Hugging Face Llama sharded on a mesh under a rules file, on token rows of a "
      "safetensors file "
      "(works under mpirun: each process reads only its rows and holds only its devices' shards).");
  cmd->add_option("--model", o->model_dir,
                  "Hugging Face Llama directory: config.json and model.safetensors; with an "
                  "optimizer.safetensors "
                  "saved by --save, training resumes from it")
      ->required();
  cmd->add_option("--data", o->data_path,
                  "safetensors file with one I32 tensor tokens of shape (rows, seq + 1)")
      ->required();
  cmd->add_option("--rules", o->rules_path,
                  "JSON rules file (e.g. examples/rules/llama_megatron.json); default: every "
                  "variable replicated");
  cmd->add_option("--mesh", o->mesh,
                  "mesh, e.g. batch=2,model=4; default: the rules file's \"mesh\", else batch=<all "
                  "devices>,model=1");
  cmd->add_option("--batch-size", o->batch_size, "global batch: rows per step")->required();
  cmd->add_option("--steps", o->steps, "training steps")->required();
  cmd->add_option("--optimizer", o->optimizer,
                  fmt::format("a Keras optimizer by name, with Keras 3's defaults: {}",
                              join(optimizer_names(), ", ")))
      ->default_str("adamw");
  cmd->add_option("--learning-rate", o->learning_rate,
                  "default: the optimizer's (Keras 3: sgd 0.01, the others 0.001)");
  cmd->add_option("--weight-decay", o->weight_decay,
                  "decoupled weight decay; default: adamw 0.004, others none");
  cmd->add_flag("--zero1", o->zero1,
                "ZeRO-1: shard each optimizer slot further over the batch axis (1/batch-size of "
                "the slots per "
                "device; same updates; saved state resumes with or without it)");
  cmd->add_option(
      "--save", o->save_dir,
      "new or empty directory: writes config.json, model.safetensors and optimizer.safetensors");
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "save a training state after every N-th step (with --checkpoint-dir)");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "directory of the training states: DIR/step-<iterations>, each resumable with "
                  "--model");
  cmd->add_option("--keep-last", o->keep_last,
                  "keep only the newest K training states in --checkpoint-dir (default: all)");
  cmd->add_flag("--json", o->json, "print one JSON object per step: {\"step\", \"loss\"}");
  cmd->callback([o, exit_code] { *exit_code = run_train(*o, std::cout); });
}

}  // namespace meshlayout::cli
