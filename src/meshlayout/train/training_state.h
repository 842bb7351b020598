// training_state.h — a training run's state as one directory, saved together and atomically and
// resumed on any mesh or process count:
//   the model's files         written by the model's own saver (ModelFiles: for the Llama a
//                             Hugging Face directory, config.json + model.safetensors);
//   optimizer.safetensors     the optimizer's variables under their Keras paths ("adamw/iteration",
//                             "adamw/<variable path>_momentum", …; RNG state variables of the
//                             model, if any, are model variables and go with the model's files);
//   meshlayout_save.json      the completion marker, written last (io/save_directory.h): the step
//                             counter (the optimizer's iterations) and the data position (the
//                             next batch a resumed fit reads), the optimizer's name, the files.
// A directory is complete or recognisably incomplete after any interruption; an incomplete one is
// never resumed from. Resuming loads each optimizer variable by path into its slot in the
// current layouts (any mesh, ZeRO-1 or not, any process count).
// TrainingCheckpoint is fit's checkpoint callback: every N steps a state directory
// <root>/step-<iterations>, keeping the last K complete ones.
//
// Example:
//   ModelFiles files{.names = {"config.json", "model.safetensors"},
//                    .write = [&](const std::string& dir) { save_hf_llama(dir, config, w); }};
//   save_training_state("ckpt", files, optimizer, {.iterations = 10, .next_batch = 10});
//   std::optional<TrainingPosition> p = resume_training_state("ckpt", optimizer, variables);
//   auto every = std::make_shared<TrainingCheckpoint>("run", files,
//                                                     TrainingCheckpointOptions{.every_steps = 100,
//                                                                               .keep_last = 3});
//   trainer.fit(data, {.batch_size = 8, .steps_per_epoch = 1000, .callbacks = {every}});
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/io/save_directory.h"
#include "meshlayout/nn/variable.h"
#include "meshlayout/train/optimizer.h"
#include "meshlayout/train/trainer.h"

namespace meshlayout {

/// The file the optimizer's variables are saved to, inside a training state directory.
inline constexpr const char* kOptimizerStateFile = "optimizer.safetensors";
/// The marker's "format" value.
inline constexpr const char* kTrainingStateFormat = "meshlayout train state";

/// How a model writes its own files into a state directory.
struct ModelFiles {
  std::vector<std::string> names;  // the files `write` creates, e.g. {"config.json", …}
  /// Writes them into the directory; collective (every process calls it).
  std::function<void(const std::string& dir)> write;
};

/// Where a run stands: what a state directory records and a resumed run continues from.
struct TrainingPosition {
  int64_t iterations = 0;  // the optimizer's step counter
  int64_t next_batch = 0;  // the data position: the batch a resumed fit reads first
};

/// Writes the model's files and the optimizer's state into `dir`, then (process 0, `claim`
/// not null) the marker with `position` and the `extra` fields, which finishes the claim.
/// `dir` must be claimed already (SaveDirectory::claim on process 0). Collective; a failure is
/// thrown on the process it happened on (callers agree on it).
void write_training_state(const std::string& dir, SaveDirectory* claim, const ModelFiles& model,
                          const Optimizer& optimizer, const TrainingPosition& position,
                          const nlohmann::json& extra = nlohmann::json::object());

/// Claims `dir` (a new or empty directory; SaveDirectory::claim's errors) on process 0 and
/// writes the state into it (`extra`: more marker fields, e.g. Python fit's epoch). Collective:
/// every process throws the same error, or none does.
void save_training_state(const std::string& dir, const ModelFiles& model,
                         const Optimizer& optimizer, const TrainingPosition& position,
                         const nlohmann::json& extra = nlohmann::json::object());

/// The state saved in `dir`, loaded into `optimizer` (built for `variables` if it is not):
/// std::nullopt when `dir` holds no optimizer state (a plain model directory). Its position:
/// the marker's, else (a directory written without one) iterations from the state and
/// next_batch = iterations. FailedPreconditionError for an incomplete save; ValueError naming
/// the difference when the file holds another optimizer's variables (by Keras path).
std::optional<TrainingPosition> resume_training_state(const std::string& dir, Optimizer& optimizer,
                                                      const std::vector<VariablePtr>& variables);

struct TrainingCheckpointOptions {
  int64_t every_steps = 0;  // >= 1: save after every step whose iteration count it divides
  int64_t keep_last = 0;    // >= 1: keep the newest K state directories; 0 keeps all
};

/// fit's checkpoint callback (Keras' BackupAndRestore / ModelCheckpoint for training state):
/// after a step that brings the optimizer's iterations to a multiple of every_steps, saves the
/// state into <root>/step-<iterations> (8 digits at least, so names sort by step), then removes
/// the oldest complete state directories beyond keep_last. `root` is created if missing.
/// ValueError at construction for every_steps < 1, keep_last < 0 or a root that is a file.
class TrainingCheckpoint : public Callback {
 public:
  TrainingCheckpoint(std::string root, ModelFiles model, TrainingCheckpointOptions options);
  void on_train_batch_end(Trainer& trainer, const BatchLogs& logs) override;
  /// The state directories written by this callback, oldest first (removed ones left out).
  const std::vector<std::string>& saved() const { return saved_; }
  /// The newest complete state directory under `root` (by step), or "" when there is none.
  static std::string latest(const std::string& root);

 private:
  std::string root_;
  ModelFiles model_;
  TrainingCheckpointOptions options_;
  std::vector<std::string> saved_;
};

}  // namespace meshlayout
