// llama_train.cc — see llama_train.h.
#include "meshlayout/models/llama_train.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/train/trainer.h"

namespace meshlayout {
namespace {

// Each step's loss, and the caller's on_step, from fit's batch ends.
class StepRecorder : public Callback {
 public:
  StepRecorder(std::vector<double>& losses, std::function<void(int64_t, double)> on_step)
      : losses_(losses), on_step_(std::move(on_step)) {}
  void on_train_batch_end(Trainer&, const BatchLogs& logs) override {
    losses_.push_back(logs.loss);
    if (on_step_) on_step_(logs.step, logs.loss);
  }

 private:
  std::vector<double>& losses_;
  std::function<void(int64_t, double)> on_step_;
};

}  // namespace

double llama_train_step(LlamaModel& model, Optimizer& optimizer, const Array& inputs,
                        const Array& targets) {
  Gradients grads;
  const double loss = model.loss_and_gradients(inputs, targets, grads);
  if (!std::isfinite(loss)) {
    throw ValueError(fmt::format("the loss is {} at optimizer step {}: no variable was updated",
                                 loss, optimizer.iterations()));
  }
  const std::vector<VariablePtr> variables = model.variables();
  optimizer.apply(grads.for_variables(variables), variables);
  return loss;
}

LlamaTrainResult train_llama(LlamaModel& model, const TokenDataset& data, Optimizer& optimizer,
                             const LlamaTrainOptions& options) {
  if (options.batch_size < 1 || options.steps < 1 || options.first_step < 0) {
    throw ValueError(fmt::format(
        "train needs batch_size >= 1, steps >= 1 and first_step >= 0, got batch_size {}, "
        "steps {} and first_step {}",
        options.batch_size, options.steps, options.first_step));
  }
  model.distribution()->process_batch_rows(
      options.batch_size);  // Keras' error for an indivisible batch
  // Every product and sum of the options is checked: --steps 9223372036854775807 on a resumed
  // run used to wrap first_step + steps negative, run no step and exit 0.
  const std::optional<int64_t> end_step = checked_add(options.first_step, options.steps);
  const std::optional<int64_t> rows_needed =
      end_step ? checked_mul(*end_step, options.batch_size) : std::nullopt;
  if (!rows_needed) {
    throw ValueError(fmt::format(
        "training data {} has {} rows, but {} steps from step {} of batch {} need more "
        "than 2^63 - 1 rows (the step count overflows)",
        quote(data.path()), data.rows(), options.steps, options.first_step, options.batch_size));
  }
  if (*rows_needed > data.rows()) {
    throw ValueError(fmt::format(
        "training data {} has {} rows, but steps {} to {} of batch {} need {}", quote(data.path()),
        data.rows(), options.first_step, *end_step - 1, options.batch_size, *rows_needed));
  }
  if (data.sequence_length() > model.config().max_position_embeddings) {
    throw ValueError(fmt::format(
        "training data {} has sequences of {} positions, more than the model's "
        "max_position_embeddings ({})",
        quote(data.path()), data.sequence_length(), model.config().max_position_embeddings));
  }
  // One trainer: the Llama is a Model whose fused path computes this loss (llama.h). The
  // caller keeps owning the model and the optimizer: the Trainer gets non-owning handles.
  Trainer trainer = compile(
      std::shared_ptr<Model>(std::shared_ptr<Model>(), &model),
      {.optimizer_instance = std::shared_ptr<Optimizer>(std::shared_ptr<Optimizer>(), &optimizer),
       .loss = "sparse_categorical_crossentropy",
       .loss_options = {.from_logits = true}});
  LlamaTrainResult result;
  auto steps = std::make_shared<StepRecorder>(result.losses, options.on_step);
  std::vector<std::shared_ptr<Callback>> callbacks = {steps};
  callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(data, {.batch_size = options.batch_size,
                     .epochs = 1,
                     .verbose = 0,
                     .steps_per_epoch = options.steps,
                     .first_batch = options.first_step,
                     .callbacks = callbacks});
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // rows_needed <= rows and rows * (seq + 1) elements fit the file: no overflow.
  result.tokens = options.steps * options.batch_size * data.sequence_length();
  return result;
}

}  // namespace meshlayout
