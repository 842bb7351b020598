// lstm.h — the per-shard kernel of keras.layers.LSTM (nn/layers/rnn/lstm.h): one device's rows
// through the whole recurrence (gates i, f, c, o; the input projection for every step in one matrix
// product, then one product with the recurrent kernel per step).
//
// Example (per distinct batch block o of the output, in nn/layers/rnn/lstm.cc):
//   lstm_forward(kind, {.out = &o, .x = xs.shard_at(o.position), .kernel = …, .recurrent = …,
//                       .bias = nullptr, .steps = 6, .features = 3, .units = 5,
//                       .return_sequences = false, .dtype = DType::kF32});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// out (rows, steps, units) with return_sequences, else (rows, units) = the LSTM of x (rows,
/// steps, features), rows the out shard's first extent; nothing for no rows or units.
struct LstmForward {
  Array::Shard* out;
  const Array::Shard* x;
  const Array::Shard* kernel;     // (features, 4·units), whole
  const Array::Shard* recurrent;  // (units, 4·units), whole
  const Array::Shard* bias;       // (4·units), whole; null without a bias
  int64_t steps, features, units;
  bool return_sequences;
  DType dtype;  // F32 or F64
};

void lstm_forward_cpu(const LstmForward& args);

inline KernelOp<void(const LstmForward&)> lstm_forward{"lstm_forward", &lstm_forward_cpu};

}  // namespace meshlayout
