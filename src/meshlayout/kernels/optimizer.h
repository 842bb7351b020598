// optimizer.h — the per-shard kernels of the optimizers (train/optimizer.h and one file per
// optimizer): the sums of squares behind clipnorm (and Adafactor's RMS), the preparation of a
// shard's step (the gradient cast to the variable's dtype and clipped, decoupled weight decay), one
// update per optimizer (kernels/<name>_update.h: its per-element rule, after that preparation, on
// the variable's shard and its slots' shards), and the scalar writes of the iteration and
// learning-rate variables. The optimizers' own parameters are the small structs below (train/ sits
// above kernels/: its options structs are turned into these).
//
// Example (per local shard x of a variable, in train/optimizer_apply.cc and train/adam.cc):
//   const OptimizerShardStep step{.theta = &x, .dtype = DType::kF32, .grad = g.shard_at(…),
//                                 .grad_dtype = DType::kF32, .slots = slot_shards, .lr = 1e-3f,
//                                 .iterations = 0};
//   adam_update(kind_of(value), {step, AdamParams{0.9, 0.999, 1e-7, false}});   // adam_update.h
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// Adds the squares of a shard's elements (F32 or F64, each read as double), in element order,
/// to *sum: a gradient's for clipnorm, a variable's for Adafactor's RMS.
struct SumOfSquares {
  const Array::Shard* shard;
  DType dtype;
  double* sum;
};

/// One local shard's step of a variable. The kernels first prepare it: the gradient of the box
/// in the variable's dtype (cast, then clipped: clipvalue elementwise, or g·first/second for
/// clipnorm (c, max(‖g‖, c)) and global_clipnorm (scale, 1)), and θ ← θ − θ·wd·lr when
/// weight_decay is set (pre-update θ); then apply the optimizer's rule.
struct OptimizerShardStep {
  Array::Shard* theta;                   // the variable's shard (its ZeRO-1 slice under ZeRO-1)
  DType dtype;                           // the variable's, F32 or F64
  const Array::Shard* grad;              // the gradient of theta's box
  DType grad_dtype;                      // F32 or F64
  std::span<Array::Shard* const> slots;  // the slots' shards of theta's box, slot_names() order
  float lr;                              // the learning rate as stored
  int64_t iterations;                    // before this step
  std::optional<double> clipvalue;
  std::optional<std::pair<double, double>> norm_clip;  // (multiplier, divisor)
  std::optional<double> weight_decay;                  // set when this variable decays
};

/// The preparation alone, for an optimizer that updates whole variables (Adafactor): weight
/// decay on step.theta, and the prepared gradient written into `prepared` (theta's box, its
/// dtype). step.slots is not read.
struct OptimizerPrepare {
  OptimizerShardStep step;
  Array::Shard* prepared;
};

/// An optimizer's update of one shard: the preparation, then its rule with `params`.
template <typename Params>
struct OptimizerUpdate {
  OptimizerShardStep step;
  Params params;
};

/// `bytes` bytes from host memory into the start of a shard (a scalar variable's value).
struct WriteScalar {
  Array::Shard* shard;
  const void* value;
  size_t bytes;
};

void sum_of_squares_cpu(const SumOfSquares& args);
void optimizer_prepare_cpu(const OptimizerPrepare& args);
void write_scalar_cpu(const WriteScalar& args);

inline KernelOp<void(const SumOfSquares&)> sum_of_squares{"sum_of_squares", &sum_of_squares_cpu};
inline KernelOp<void(const OptimizerPrepare&)> optimizer_prepare{"optimizer_prepare",
                                                                 &optimizer_prepare_cpu};
inline KernelOp<void(const WriteScalar&)> write_scalar{"write_scalar", &write_scalar_cpu};

}  // namespace meshlayout
