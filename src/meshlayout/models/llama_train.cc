// llama_train.cc — see llama_train.h.
#include "meshlayout/models/llama_train.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

TokenDataset TokenDataset::open(const std::string& path) {
  TokenDataset data(Checkpoint::open(path));
  const auto [file, info] = data.checkpoint_.find("tokens");
  if (info == nullptr) {
    throw NotFoundError(fmt::format("training data {} has no tensor \"tokens\" (expected one I32 tensor "
                                    "tokens of shape (rows, seq + 1))", quote(path)));
  }
  if (info->dtype_name != "I32" || info->shape.size() != 2 || info->shape[1] < 2) {
    throw ValueError(fmt::format("training data {}: tokens must be I32 of shape (rows, seq + 1) with seq >= 1, "
                                 "got {} {}", quote(path), info->dtype_name, shape_to_string(info->shape)));
  }
  data.rows_ = info->shape[0];
  data.columns_ = info->shape[1];
  return data;
}

std::pair<Array, Array> TokenDataset::batch(int64_t step, int64_t batch_size, const Distribution& distribution) const {
  if ((step + 1) * batch_size > rows_) {
    throw ValueError(fmt::format("training data {} has {} rows; step {} needs rows [{}, {})", quote(path()), rows_,
                                 step, step * batch_size, (step + 1) * batch_size));
  }
  const RowRange mine = distribution.process_batch_rows(batch_size);
  const auto [file, info] = checkpoint_.find("tokens");
  const int64_t n = mine.end - mine.begin, T = columns_ - 1;
  HostTensor rows(DType::kI32, {n, columns_});
  if (n > 0) {
    file->read_box(*info, Box{{step * batch_size + mine.begin, 0}, {n, columns_}}, rows.data());
  }
  HostTensor inputs(DType::kI32, {n, T}), targets(DType::kI32, {n, T});
  for (int64_t r = 0; r < n; ++r) {
    const int32_t* row = rows.data_as<int32_t>() + r * columns_;
    std::memcpy(inputs.data_as<int32_t>() + r * T, row, static_cast<size_t>(T) * sizeof(int32_t));
    std::memcpy(targets.data_as<int32_t>() + r * T, row + 1, static_cast<size_t>(T) * sizeof(int32_t));
  }
  return {distribution.distribute_process_batch(inputs, batch_size),
          distribution.distribute_process_batch(targets, batch_size)};
}

double llama_train_step(LlamaModel& model, Optimizer& optimizer, const Array& inputs, const Array& targets) {
  Gradients grads;
  const double loss = model.loss_and_gradients(inputs, targets, grads);
  if (!std::isfinite(loss)) {
    throw ValueError(fmt::format("the loss is {} at optimizer step {}: no variable was updated", loss,
                                 optimizer.iterations()));
  }
  const std::vector<VariablePtr> variables = model.variables();
  optimizer.apply(grads.for_variables(variables), variables);
  return loss;
}

LlamaTrainResult train_llama(LlamaModel& model, const TokenDataset& data, Optimizer& optimizer,
                             const LlamaTrainOptions& options) {
  if (options.batch_size < 1 || options.steps < 1 || options.first_step < 0) {
    throw ValueError(fmt::format("train needs batch_size >= 1, steps >= 1 and first_step >= 0, got batch_size {}, "
                                 "steps {} and first_step {}", options.batch_size, options.steps, options.first_step));
  }
  const Distribution& distribution = model.distribution();
  distribution.process_batch_rows(options.batch_size);  // Keras' error for an indivisible batch
  const int64_t end_step = options.first_step + options.steps;
  if (end_step * options.batch_size > data.rows()) {
    throw ValueError(fmt::format("training data {} has {} rows, but steps {} to {} of batch {} need {}",
                                 quote(data.path()), data.rows(), options.first_step, end_step - 1,
                                 options.batch_size, end_step * options.batch_size));
  }
  if (data.sequence_length() > model.config().max_position_embeddings) {
    throw ValueError(fmt::format("training data {} has sequences of {} positions, more than the model's "
                                 "max_position_embeddings ({})", quote(data.path()), data.sequence_length(),
                                 model.config().max_position_embeddings));
  }
  LlamaTrainResult result;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = options.first_step; step < end_step; ++step) {
    const auto [inputs, targets] = data.batch(step, options.batch_size, distribution);
    const double loss = llama_train_step(model, optimizer, inputs, targets);
    result.losses.push_back(loss);
    if (options.on_step) options.on_step(step, loss);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.tokens = options.steps * options.batch_size * data.sequence_length();
  return result;
}

}  // namespace meshlayout
