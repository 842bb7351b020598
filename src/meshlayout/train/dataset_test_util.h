// dataset_test_util.h — HostRowsDataset: a BatchDataset over in-memory (x, y) rows for the
// trainer's and the training state's tests (each process copies only its rows, as TokenDataset
// reads only its rows from the file).
#pragma once

#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/train/batch_dataset.h"

namespace meshlayout {

class HostRowsDataset : public BatchDataset {
 public:
  HostRowsDataset(HostTensor x, HostTensor y) : x_(std::move(x)), y_(std::move(y)) {}
  int64_t rows() const override { return x_.shape()[0]; }
  std::string description() const override { return "the test rows"; }
  std::pair<Array, Array> read_batch(int64_t first_row, int64_t count,
                                     const Distribution& distribution) const override {
    if (first_row < 0 || count < 1 || first_row + count > rows()) {
      throw ValueError(
          fmt::format("the test rows: {} rows from row {} of {}", count, first_row, rows()));
    }
    const RowRange mine = distribution.process_batch_rows(count);
    return {distribution.distribute_process_batch(
                slice(x_, first_row + mine.begin, mine.end - mine.begin), count),
            distribution.distribute_process_batch(
                slice(y_, first_row + mine.begin, mine.end - mine.begin), count)};
  }

 private:
  static HostTensor slice(const HostTensor& t, int64_t begin, int64_t n) {
    Shape shape = t.shape();
    shape[0] = n;
    HostTensor out(t.dtype(), shape);
    const size_t row_bytes = t.num_bytes() / static_cast<size_t>(t.shape()[0]);
    if (n > 0) {
      std::memcpy(out.data(), t.data() + static_cast<size_t>(begin) * row_bytes,
                  static_cast<size_t>(n) * row_bytes);
    }
    return out;
  }
  HostTensor x_, y_;
};

}  // namespace meshlayout
