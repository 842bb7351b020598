// trainer.h — Keras' model.compile / fit / evaluate / predict on in-memory arrays (HostTensors,
// as Keras' NumPy inputs), for Sequential and functional models, on one device, any mesh, and
// under mpirun.
//
// Semantics (Keras 3, keras/src/trainers/trainer.py and backend/jax/trainer.py):
//  * the data is read in global batches of batch_size rows, in order (shuffle=false) or in a
//    permutation drawn per epoch from shuffle_seed (the same on every process); the last batch
//    is smaller when batch_size does not divide the rows (Keras' partial batch);
//  * a step: forward on the global batch, loss (a mean over the global batch), the model's
//    backward (gradients already summed over data replicas), the optimizer's apply;
//  * regularisation (Keras' compute_loss: the compiled loss plus model.losses): a step's loss
//    is the compiled loss plus the penalty of every trainable variable that has a regulariser
//    (kernel_regularizer, bias_regularizer, …; Keras reads trainable_weights, so a frozen
//    weight's adds nothing), each computed on the distributed value before the step's update
//    (one all-reduce per regularised variable, no gathering), once per batch, not scaled by
//    its rows; each such variable's gradient gets Regularizer::gradient (l1·sign(w) + 2·l2·w)
//    added in its own layout, element by element, no communication. History::loss, the
//    progress line, terminate_on_nan and evaluate() all see that total, as Keras' loss tracker;
//  * History::loss[e] is Keras' history.history["loss"]: the loss tracker of the epoch, a Mean
//    weighted by each batch's row count (update_state(loss, sample_weight=batch rows)), so a
//    partial last batch weighs less; evaluate() returns the same weighted mean, no update;
//  * data sharding: under the model's distribution (else ModelParallel(model's LayoutMap), else
//    DataParallel on the mesh of the model's variables) each process copies only its rows of
//    each batch (Distribution::process_batch_rows) and feeds them with
//    distribute_process_batch, as Keras' JAX backend; a short last batch that the data shards or
//    the batch axis do not split evenly is fed from the whole in-memory batch (every process
//    holds x) with distribute_input, each device taking its block. A batch_size not divisible by
//    the data shards is Keras' ValueError;
//  * progress on stderr (progress.h), process 0 only;
//  * NaN: Keras' fit keeps going on a NaN loss unless the TerminateOnNaN callback is given.
//    Decision: FitOptions::terminate_on_nan (default true) stops fit with a ValueError naming
//    the epoch, the step and the loss, BEFORE that step's update (Keras' callback stops after
//    it); false keeps Keras' default behaviour.
// Every check is made on replicated metadata or agreed across processes (agree_on_failure):
// every process throws the same error, none is left waiting.
//
// Example:
//   auto model = std::make_shared<Sequential>(layers, SequentialOptions{.input_shape = Shape{4}});
//   Trainer trainer = compile(model, {.optimizer = "adam", .loss = "mse"});
//   (compile(model, {.optimizer = "adam", .loss = "mse", .zero1 = true}): ZeRO-1 slots)
//   History h = trainer.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0});
//   h.loss.size() == 3;
//   double test_loss = trainer.evaluate(x, y, {.batch_size = 8});
//   HostTensor y_pred = trainer.predict(x, {.batch_size = 8});   // (rows, …) on every process
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/train/losses.h"
#include "meshlayout/train/optimizer.h"

namespace meshlayout {

struct CompileOptions {
  /// make_optimizer's name (optimizer_names(): "sgd", "adam", "rmsprop", …) with
  /// optimizer_options; ignored when optimizer_instance is set. One of the two is required
  /// (Keras' compile defaults to "rmsprop"; here the choice is explicit).
  std::string optimizer;
  OptimizerOptions optimizer_options;
  std::shared_ptr<Optimizer> optimizer_instance;
  /// ZeRO-1 (optimizer.h): the named optimizer's slots sharded further over the data
  /// distribution's batch axis (data_distribution()->batch_dim_name(), resolved here), i.e.
  /// optimizer_options.shard_slots_over set to it. ValueError with optimizer_instance or with
  /// shard_slots_over also set; FailedPreconditionError when the model has no distribution yet.
  bool zero1 = false;
  /// make_loss's name ("mse", "mean_squared_error", "sparse_categorical_crossentropy").
  std::string loss;
  LossOptions loss_options;
};

struct FitOptions {
  int64_t batch_size = 32;  // global rows per step
  int64_t epochs = 1;
  bool shuffle = false;
  uint64_t shuffle_seed = 0;
  int verbose = 1;  // 0 silent, 1 auto (bar on a terminal, else a line), 2 a line per epoch
  bool terminate_on_nan = true;
  /// Called on every process after each epoch with (epoch index, its loss).
  std::function<void(int64_t, double)> on_epoch_end;
  std::ostream* out = nullptr;  // progress output; std::cerr when null
};

struct EvaluateOptions {
  int64_t batch_size = 32;
  int verbose = 0;
  std::ostream* out = nullptr;
};

struct PredictOptions {
  int64_t batch_size = 32;
};

/// keras History: history.history["loss"].
struct History {
  std::vector<double> loss;
};

class Trainer {
 public:
  /// model.compile(optimizer, loss). ValueError for a null model, no optimizer, an unknown
  /// optimizer or loss name (listing the valid ones), a zero1 request it cannot honour.
  Trainer(std::shared_ptr<Model> model, CompileOptions options);

  /// model.fit(x, y). Collective. ValueError (before any step) for batch_size < 1, epochs < 0,
  /// no rows, x and y with different row counts, a scalar x or y, Keras' divisibility error;
  /// at the first step for a target the loss cannot take (shapes and dtypes named); a
  /// FailedPreconditionError for a model that is not built and has no distribution or
  /// LayoutMap to build under, or whose backward is missing (subclassed models).
  History fit(const HostTensor& x, const HostTensor& y, const FitOptions& options = {});
  /// model.evaluate(x, y): the batch-size-weighted mean loss, the regularisation penalties of
  /// the trainable weights included (as fit's). Collective.
  double evaluate(const HostTensor& x, const HostTensor& y, const EvaluateOptions& options = {});
  /// model.predict(x): the outputs of every batch, concatenated, on every process. Collective.
  HostTensor predict(const HostTensor& x, const PredictOptions& options = {});

  Model& model() const { return *model_; }
  Optimizer& optimizer() const { return *optimizer_; }
  const Loss& loss() const { return *loss_; }
  /// The distribution batches are fed under (see the header comment). FailedPreconditionError
  /// for a model not built with neither distribution nor LayoutMap.
  std::shared_ptr<const Distribution> data_distribution() const;

 private:
  std::shared_ptr<Model> model_;
  std::shared_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
};

/// model.compile(…): Trainer(model, options).
Trainer compile(std::shared_ptr<Model> model, CompileOptions options);

}  // namespace meshlayout
