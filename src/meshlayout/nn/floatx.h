// floatx.h — the default float type of new weights (keras.config.floatx / set_floatx).
//
// A floating weight whose VariableSpec leaves `dtype` unset takes the dtype of the layer that
// creates it, and a layer takes floatx() when it is constructed (Keras: a layer's dtype policy
// defaults to the global one, read at construction; a Variable without a dtype takes floatx()).
// Layers compute in the dtype of their weights, F32 or F64: the Llama's (Dense, EinsumDense,
// RMSNormalization, Embedding, MultiHeadAttention and the ops under them), LSTM,
// LayerNormalization, BatchNormalization (batch and moving statistics), Conv2D, and Dropout (its
// own dtype: it has no float weights), forward and backward; an input or dy of another dtype is
// a ValueError naming both (no implicit cast). LayerNormalization, BatchNormalization, Conv2D and
// Dropout refuse F16/BF16 weights at build (ValueError naming the layer and the dtype).
//
// Two ways to set it:
//   set_floatx(DType::kF64)   process-wide, as keras.config.set_floatx("float64"). Tests run
//                             processes as threads of one process: set it before the ranks
//                             start (every rank then sees it), not from inside one rank.
//   FloatxScope s(kF64);      this thread only, until s ends (nests; wins over set_floatx):
//                             one rank, or one model (LlamaModel builds under one), can choose
//                             its dtype without touching the others.
//
// Example:
//   FloatxScope f64(DType::kF64);
//   auto d = std::make_shared<Dense>(8);   // d->dtype() == kF64: kernel and bias F64
//   Array y = d->call_on(x64);             // x64 must be F64 too
#pragma once

#include "meshlayout/core/dtype.h"

namespace meshlayout {

/// The current thread's FloatxScope dtype if one is open, else the process-wide default (F32
/// until set_floatx).
DType floatx();

/// Sets the process-wide default. F16, BF16, F32 and F64 are accepted (weights can be created in
/// each; layers compute in F32 or F64 only); anything else is a ValueError naming it.
void set_floatx(DType dtype);

/// Sets floatx() for this thread until it ends (the previous value comes back). ValueError as
/// set_floatx.
class [[nodiscard]] FloatxScope {
 public:
  explicit FloatxScope(DType dtype);
  ~FloatxScope();
  FloatxScope(const FloatxScope&) = delete;
  FloatxScope& operator=(const FloatxScope&) = delete;

 private:
  bool had_previous_;
  DType previous_;
};

}  // namespace meshlayout
