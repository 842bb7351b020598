// token_dataset.h — TokenDataset: the token rows of a causal language model's training file,
// read batch by batch (a BatchDataset). The `meshlayout train` contract:
//   data   a safetensors file with one I32 tensor `tokens` (rows, seq + 1);
//   step i uses rows [i·B, (i+1)·B): inputs tokens[:, :-1], targets tokens[:, 1:].
//
// Example:
//   TokenDataset data = TokenDataset::open("tokens.safetensors");
//   auto [inputs, targets] = data.batch(3, 8, *model.distribution());   // rows [24, 32)
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/train/batch_dataset.h"

namespace meshlayout {

class TokenDataset : public BatchDataset {
 public:
  /// Opens `path` (a .safetensors file) and checks its `tokens` tensor. NotFoundError /
  /// DataLossError naming the path for a missing or corrupt file, NotFoundError if it has no
  /// tensor "tokens", ValueError naming the dtype or shape unless it is I32 of rank 2 with at
  /// least 2 columns.
  static TokenDataset open(const std::string& path);

  int64_t rows() const override { return rows_; }
  std::string description() const override;
  /// Positions per row used for training: columns − 1.
  int64_t sequence_length() const { return columns_ - 1; }
  const std::string& path() const { return checkpoint_.path(); }
  /// The file's headers (what processes compare before training on it).
  const Checkpoint& checkpoint() const { return checkpoint_; }

  /// Inputs and targets (batch_size, seq) of step `step`, each laid out by the distribution's
  /// data layout; this process reads only its rows (Distribution::process_batch_rows). Collective.
  /// ValueError if the file has fewer than (step + 1) · batch_size rows.
  std::pair<Array, Array> batch(int64_t step, int64_t batch_size,
                                const Distribution& distribution) const;
  std::pair<Array, Array> read_batch(int64_t first_row, int64_t rows,
                                     const Distribution& distribution) const override;

 private:
  explicit TokenDataset(Checkpoint checkpoint) : checkpoint_(std::move(checkpoint)) {}
  Checkpoint checkpoint_;
  int64_t rows_ = 0, columns_ = 0;
};

}  // namespace meshlayout
