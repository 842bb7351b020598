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
//
// Fit on a BatchDataset (batch_dataset.h: data read batch by batch, each process only its rows)
// reads batches in order: with steps_per_epoch S, epoch e trains on batches first_batch + e·S …
// (a resumed run passes the batch after its last one as first_batch); without, every epoch reads
// the whole data from row 0, the last batch partial. Models with a fused loss path
// (Model::fused_loss_and_gradients, e.g. the Llama with sparse_categorical_crossentropy from
// logits) train through it; every other model through call, loss and backward.
//   TokenDataset data = TokenDataset::open("tokens.safetensors");
//   Trainer t = compile(llama, {.optimizer = "adamw", .loss = "sparse_categorical_crossentropy",
//                               .loss_options = {.from_logits = true}});
//   t.fit(data, {.batch_size = 8, .steps_per_epoch = 100, .callbacks = {checkpoint}});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/train/batch_dataset.h"
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

class Trainer;

/// What fit reports after each training step (Keras' on_train_batch_end logs).
struct BatchLogs {
  int64_t epoch = 0;  // the epoch's index
  int64_t batch = 0;  // the batch's index within its epoch
  /// Dataset fit: the batch's index in the data (rows [step·B, (step+1)·B)); array fit: the
  /// steps fit has run before this one.
  int64_t step = 0;
  double loss = 0;  // the batch's loss (regularisation included), before its update
  /// The model's outputs on the batch (the step's forward, before the update) and the batch's
  /// targets, for metrics; null on a fused loss path (Model::fused_loss_and_gradients) and in
  /// dataset fit.
  const Array* y_pred = nullptr;
  const Array* y_true = nullptr;
};

/// keras.callbacks.Callback: fit calls each hook on every process, in this order: on_train_begin,
/// on_train_batch_end after every step, on_epoch_end after every epoch, on_train_end (not when
/// fit throws). A hook that throws stops fit with its error.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(Trainer& /*trainer*/) {}
  virtual void on_train_batch_end(Trainer& /*trainer*/, const BatchLogs& /*logs*/) {}
  virtual void on_epoch_end(Trainer& /*trainer*/, int64_t /*epoch*/, double /*loss*/) {}
  virtual void on_train_end(Trainer& /*trainer*/) {}
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
  /// Dataset fit: batches per epoch (Keras' steps_per_epoch); 0: every batch of the data.
  /// Array fit (Keras >= 3.4's EpochIterator on arrays): the batches run on from epoch to epoch
  /// through one pass over the rows; an epoch ends after steps_per_epoch batches, or earlier
  /// when the pass runs out (Keras warns "Your input ran out of data"), and the next epoch then
  /// starts a new pass (shuffled anew: pass p's order is row_order(…, p)); 0: one pass an epoch.
  int64_t steps_per_epoch = 0;
  /// Array fit: Keras' initial_epoch, the index of the first epoch run (epochs counts from 0:
  /// epochs - initial_epoch epochs run, shown "Epoch initial_epoch+1/epochs"). The batches are
  /// those the same fit from epoch 0 would have given those epochs (the same shuffles; with
  /// steps_per_epoch, the position in the pass), so a fit resumed at epoch e continues the
  /// uninterrupted run. Dataset fit: must be 0 (first_batch says where to read).
  int64_t initial_epoch = 0;
  /// Dataset fit with steps_per_epoch: the index of the first batch read (rows
  /// [first_batch·B, …)); a resumed run continues at the batch after its last one.
  int64_t first_batch = 0;
  std::vector<std::shared_ptr<Callback>> callbacks;
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
  /// model.fit(dataset): batches read from `data` (see the header comment). Collective.
  /// ValueError (before any step) for batch_size < 1, epochs < 0, steps_per_epoch < 0,
  /// first_batch < 0 or given without steps_per_epoch, shuffle (a dataset is read in order),
  /// data without rows or with fewer rows than the steps need, a batch (or the partial last
  /// batch) the data shards do not divide (Keras' message).
  History fit(const BatchDataset& data, const FitOptions& options = {});
  /// model.evaluate(x, y): the batch-size-weighted mean loss, the regularisation penalties of
  /// the trainable weights included (as fit's). Collective.
  double evaluate(const HostTensor& x, const HostTensor& y, const EvaluateOptions& options = {});
  /// model.predict(x): the outputs of every batch, concatenated, on every process. Collective.
  HostTensor predict(const HostTensor& x, const PredictOptions& options = {});

  Model& model() const { return *model_; }
  Optimizer& optimizer() const { return *optimizer_; }
  const Loss& loss() const { return *loss_; }
  /// The compiled loss as models' fused paths see it.
  const CompiledLoss& compiled_loss() const { return compiled_loss_; }
  /// Dataset fit: the index of the next batch fit would read (the data position a training
  /// state saves); 0 before any dataset fit.
  int64_t next_batch() const { return next_batch_; }
  /// The distribution batches are fed under (see the header comment). FailedPreconditionError
  /// for a model not built with neither distribution nor LayoutMap.
  std::shared_ptr<const Distribution> data_distribution() const;

 private:
  std::shared_ptr<Model> model_;
  std::shared_ptr<Optimizer> optimizer_;
  std::unique_ptr<Loss> loss_;
  CompiledLoss compiled_loss_;
  int64_t next_batch_ = 0;

  // One step on a global batch: the loss (plus regularisation) and the gradients — through the
  // model's fused path when it has one — then the optimizer's update. `where` describes the
  // batch for the terminate_on_nan error.
  double train_step(Tensor x, const Array& y, bool terminate_on_nan,
                    const std::function<std::string()>& where,
                    std::optional<Tensor>* y_pred = nullptr);
};

/// model.compile(…): Trainer(model, options).
Trainer compile(std::shared_ptr<Model> model, CompileOptions options);

}  // namespace meshlayout
