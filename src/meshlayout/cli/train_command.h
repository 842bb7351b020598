// train_command.h — `meshlayout train`: trains a Hugging Face Llama sharded on a device mesh
// under a rules file, on token rows from a safetensors file, with a Keras optimizer whose
// slots live in their variables' layouts. Works unchanged under mpirun (each process reads only
// its rows and holds only its devices' shards; process 0 prints).
//
//   meshlayout train --model DIR --data FILE --batch-size B --steps N
//       [--rules FILE] [--mesh SPEC] [--optimizer adamw] [--learning-rate 1e-3]
//       [--weight-decay 0.004] [--zero1] [--save DIR] [--json]
//
// FILE holds one I32 tensor `tokens` (rows, seq + 1); step k uses rows [k·B, (k+1)·B), inputs
// tokens[:, :-1], targets tokens[:, 1:]; the loss is the mean sparse categorical cross-entropy
// over all B·seq positions. --json prints {"step": k, "loss": x} per step (the loss before that
// step's update); otherwise a report with the losses, tokens/s and per-device memory.
// --save DIR (new or empty) writes the trained model in Hugging Face form (config.json,
// model.safetensors) and the optimizer's variables under their Keras paths
// (optimizer.safetensors: "adamw/iteration", "adamw/<variable>_momentum", …). Given such a
// directory as --model with the same --optimizer, training resumes: the optimizer's state is
// loaded into its slots in the current layouts (any mesh or process count) and step numbering
// and rows continue from its iteration. --save is claimed before the first step
// (io/save_directory.h: created, locked against a second run, checked writable) and
// meshlayout_save.json is written after every file, so an interrupted save is recognisably
// incomplete; --model of such a directory is refused. A save failing after training goes to
// a new temporary directory, and the error says where. Under mpirun the processes first
// agree on every option and on digests of config.json, the rules, the weights' headers, the
// data and the optimizer state (command_agreement.h).
// --checkpoint-every N --checkpoint-dir DIR [--keep-last K] saves a training state after every
// N-th step (the optimizer's iterations a multiple of N) into DIR/step-<iterations> (8 digits),
// each directory a complete --save (config.json, model.safetensors, optimizer.safetensors and
// the marker with iterations and next_batch) that --model resumes from; --keep-last K removes
// all but the newest K (train/training_state.h TrainingCheckpoint).
// --zero1: ZeRO-1, each optimizer slot sharded further over the distribution's batch axis
// (optimizer.h's shard_slots_over): the same updates with 1/batch-size of the slots of
// batch-replicated weights per device. Slots keep their Keras paths, so a state saved with
// --zero1 resumes without it and vice versa.
//
// Example:
//   TrainCommandOptions o{.model_dir = dir, .data_path = "tokens.safetensors", .batch_size = 4,
//                         .steps = 10};
//   int code = run_train(o, std::cout);   // 0; errors are thrown (main.cc prints them)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace meshlayout::cli {

struct TrainCommandOptions {
  std::string model_dir;
  std::string data_path;
  std::string rules_path;           // empty: every variable replicated (pure data parallel)
  std::optional<std::string> mesh;  // default: the rules file's, else batch=<all devices>
  int64_t batch_size = 0;
  int64_t steps = 0;
  std::string optimizer = "adamw";
  std::optional<double> learning_rate;  // the optimizer's default when unset
  std::optional<double> weight_decay;   // the optimizer's default when unset
  bool zero1 = false;                   // slots sharded further over the batch axis (ZeRO-1)
  std::string save_dir;                 // empty: nothing saved
  int64_t checkpoint_every = 0;         // > 0: a training state every N steps
  std::string checkpoint_dir;           // where: <dir>/step-<iterations>
  int64_t keep_last = 0;                // > 0: keep only the newest K of them
  bool json = false;
};

/// Runs the command on the default runtime (every process calls it; output from process 0
/// only); returns the exit code (0). Errors are thrown by every process alike: bad options, a
/// missing or invalid model directory or data file (dtype, rank), a batch not divisible by
/// the data shards, too few rows, a token id outside the vocabulary, an unknown optimizer, a
/// non-finite loss or weight, a --save directory that is not new or empty (or is locked by
/// another run), optimizer state of another optimizer in the model directory, an incomplete
/// save as --model, step counts whose rows overflow.
int run_train(const TrainCommandOptions& options, std::ostream& out);

void add_train_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
