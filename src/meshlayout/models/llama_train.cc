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

namespace meshlayout {
namespace {

// "[a, b)" for the rows of step `step`, or "a onwards" when the end does not fit in int64.
std::string step_rows_text(int64_t step, int64_t batch_size) {
  const std::optional<int64_t> begin = checked_mul(step, batch_size);
  if (!begin) return "beyond 2^63 - 1";
  const std::optional<int64_t> end = checked_add(*begin, batch_size);
  return end ? fmt::format("[{}, {})", *begin, *end) : fmt::format("{} onwards", *begin);
}

}  // namespace

TokenDataset TokenDataset::open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ValueError(fmt::format(
        "training data {} is a directory; expected a safetensors file with one I32 tensor "
        "tokens of shape (rows, seq + 1)",
        quote(path)));
  }
  TokenDataset data(Checkpoint::open(path));
  const auto [file, info] = data.checkpoint_.find("tokens");
  if (info == nullptr) {
    throw NotFoundError(
        fmt::format("training data {} has no tensor \"tokens\" (expected one I32 tensor "
                    "tokens of shape (rows, seq + 1))",
                    quote(path)));
  }
  if (info->dtype_name != "I32" || info->shape.size() != 2 || info->shape[1] < 2) {
    throw ValueError(
        fmt::format("training data {}: tokens must be I32 of shape (rows, seq + 1) with seq >= 1, "
                    "got {} {}",
                    quote(path), info->dtype_name, shape_to_string(info->shape)));
  }
  data.rows_ = info->shape[0];
  data.columns_ = info->shape[1];
  return data;
}

std::pair<Array, Array> TokenDataset::batch(int64_t step, int64_t batch_size,
                                            const Distribution& distribution) const {
  if (step < 0 || batch_size < 1) {
    throw ValueError(
        fmt::format("training data {}: step {} and batch size {} must be >= 0 and >= 1",
                    quote(path()), step, batch_size));
  }
  // step < rows and batch_size <= rows, else the batch ends past the data: no overflow below.
  if (step >= rows_ || batch_size > rows_ || (step + 1) > rows_ / batch_size) {
    throw ValueError(
        fmt::format("training data {} has {} rows; step {} with batch {} needs rows from {}",
                    quote(path()), rows_, step, batch_size, step_rows_text(step, batch_size)));
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
    std::memcpy(targets.data_as<int32_t>() + r * T, row + 1,
                static_cast<size_t>(T) * sizeof(int32_t));
  }
  return {distribution.distribute_process_batch(inputs, batch_size),
          distribution.distribute_process_batch(targets, batch_size)};
}

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
  const Distribution& distribution = model.distribution();
  distribution.process_batch_rows(options.batch_size);  // Keras' error for an indivisible batch
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
  LlamaTrainResult result;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = options.first_step; step < *end_step; ++step) {
    const auto [inputs, targets] = data.batch(step, options.batch_size, distribution);
    const double loss = llama_train_step(model, optimizer, inputs, targets);
    result.losses.push_back(loss);
    if (options.on_step) options.on_step(step, loss);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // rows_needed <= rows and rows * (seq + 1) elements fit the file: no overflow.
  result.tokens = options.steps * options.batch_size * data.sequence_length();
  return result;
}

}  // namespace meshlayout
