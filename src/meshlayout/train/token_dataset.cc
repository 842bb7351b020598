// token_dataset.cc — see token_dataset.h.
#include "meshlayout/train/token_dataset.h"

#include <fmt/format.h>

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
  return read_batch(step * batch_size, batch_size, distribution);
}

std::string TokenDataset::description() const {
  return fmt::format("training data {}", quote(path()));
}

std::pair<Array, Array> TokenDataset::read_batch(int64_t first_row, int64_t batch_rows,
                                                 const Distribution& distribution) const {
  if (first_row < 0 || batch_rows < 1 || first_row > rows_ || batch_rows > rows_ - first_row) {
    throw ValueError(fmt::format("training data {} has {} rows; asked for {} rows from row {}",
                                 quote(path()), rows_, batch_rows, first_row));
  }
  const RowRange mine = distribution.process_batch_rows(batch_rows);
  const auto [file, info] = checkpoint_.find("tokens");
  const int64_t n = mine.end - mine.begin, T = columns_ - 1;
  HostTensor rows(DType::kI32, {n, columns_});
  if (n > 0) {
    file->read_box(*info, Box{{first_row + mine.begin, 0}, {n, columns_}}, rows.data());
  }
  HostTensor inputs(DType::kI32, {n, T}), targets(DType::kI32, {n, T});
  for (int64_t r = 0; r < n; ++r) {
    const int32_t* row = rows.data_as<int32_t>() + r * columns_;
    std::memcpy(inputs.data_as<int32_t>() + r * T, row, static_cast<size_t>(T) * sizeof(int32_t));
    std::memcpy(targets.data_as<int32_t>() + r * T, row + 1,
                static_cast<size_t>(T) * sizeof(int32_t));
  }
  return {distribution.distribute_process_batch(inputs, batch_rows),
          distribution.distribute_process_batch(targets, batch_rows)};
}

}  // namespace meshlayout
