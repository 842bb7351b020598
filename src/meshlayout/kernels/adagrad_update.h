// adagrad_update.h — the per-shard update kernel of keras.optimizers.Adagrad (train/adagrad.h): its
// per-element rule after the step's preparation (kernels/optimizer.h), on the variable's shard
// and its slots' shards.
//
// Example (per local shard, in train/adagrad.cc):
//   adagrad_update(kind, {step, AdagradParams{…}});
#pragma once

#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {

/// keras.optimizers.Adagrad: slots [accumulator].
struct AdagradParams {
  double epsilon;
};
using AdagradUpdate = OptimizerUpdate<AdagradParams>;

void adagrad_update_cpu(const AdagradUpdate& args);

inline KernelOp<void(const AdagradUpdate&)> adagrad_update{"adagrad_update", &adagrad_update_cpu};

}  // namespace meshlayout
