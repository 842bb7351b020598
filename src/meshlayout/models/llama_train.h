// llama_train.h — training a LlamaModel where it lives: every gradient and optimizer slot in
// its variable's layout, the batch split over the data axis, one program for one device, any
// mesh, and mpirun. The `meshlayout train` contract:
//   data   a safetensors file with one I32 tensor `tokens` (rows, seq + 1);
//   step i uses rows [i·B, (i+1)·B): inputs tokens[:, :-1], targets tokens[:, 1:];
//   loss   the mean sparse categorical cross-entropy over all B·seq positions, reported before
//          that step's update; each process reads only the rows its devices hold.
//
// Example:
//   LlamaModel model(config, llama_layout_map(mesh));
//   TokenDataset data = TokenDataset::open("tokens.safetensors");
//   auto optimizer = make_optimizer("adamw", {.learning_rate = 1e-3});
//   LlamaTrainResult r = train_llama(model, data, *optimizer, {.batch_size = 8, .steps = 10});
//   r.losses[0];   // the loss before the first update, equal on every process
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/models/llama.h"
#include "meshlayout/train/optimizer.h"
#include "meshlayout/train/token_dataset.h"
#include "meshlayout/train/trainer.h"

namespace meshlayout {

/// One training step: loss and gradients of the batch (LlamaModel::loss_and_gradients), then
/// the optimizer's update of every trainable variable. Returns the loss before the update.
/// Collective. ValueError if the loss is not finite (nothing is updated then).
double llama_train_step(LlamaModel& model, Optimizer& optimizer, const Array& inputs,
                        const Array& targets);

struct LlamaTrainOptions {
  int64_t batch_size = 0;  // global batch, rows per step
  int64_t steps = 0;
  /// The index of the first step (a resumed run continues at the optimizer's iterations): step
  /// k uses rows [k·B, (k+1)·B).
  int64_t first_step = 0;
  /// Called on every process after each step with (step index k, loss before its update).
  std::function<void(int64_t, double)> on_step;
  /// More of fit's callbacks (e.g. a TrainingCheckpoint), after on_step's.
  std::vector<std::shared_ptr<Callback>> callbacks;
};

struct LlamaTrainResult {
  std::vector<double> losses;  // per step, before its update
  double seconds = 0;          // the steps, data reads included
  int64_t tokens = 0;          // positions trained on: steps · batch · seq
};

/// `steps` steps over `data` under the model's data layout (the mesh's first axis is the batch
/// axis, as Keras' ModelParallel). Collective. ValueError before any step for batch_size < 1,
/// steps < 1, first_step < 0, a batch not divisible by the data shards (Keras' message), a file
/// with fewer than (first_step + steps) · batch_size rows, or a sequence longer than
/// max_position_embeddings; a token id outside the vocabulary is a ValueError naming it (every
/// process alike).
LlamaTrainResult train_llama(LlamaModel& model, const TokenDataset& data, Optimizer& optimizer,
                             const LlamaTrainOptions& options);

}  // namespace meshlayout
