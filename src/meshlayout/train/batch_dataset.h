// batch_dataset.h — BatchDataset: training data that fit() reads batch by batch without holding
// it in memory (Keras' fit on a dataset or a generator). A dataset hands out rows
// [first_row, first_row + rows) as (x, y), each already laid out by the data distribution, each
// process reading only the rows its devices hold. TokenDataset (token_dataset.h) is the first.
//
// Example:
//   TokenDataset data = TokenDataset::open("tokens.safetensors");   // a BatchDataset
//   History h = trainer.fit(data, {.batch_size = 8, .steps_per_epoch = 10, .verbose = 0});
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "meshlayout/array/array.h"
#include "meshlayout/nn/distribution.h"

namespace meshlayout {

class BatchDataset {
 public:
  virtual ~BatchDataset() = default;
  /// The rows (samples) the dataset holds.
  virtual int64_t rows() const = 0;
  /// What errors call the dataset ("training data 'tokens.safetensors'").
  virtual std::string description() const = 0;
  /// Inputs and targets of rows [first_row, first_row + rows), each laid out by the
  /// distribution's data layout (Distribution::distribute_process_batch); this process reads
  /// only its rows. Collective. ValueError for rows outside the dataset or a count the
  /// distribution's data shards do not divide.
  virtual std::pair<Array, Array> read_batch(int64_t first_row, int64_t rows,
                                             const Distribution& distribution) const = 0;
};

}  // namespace meshlayout
