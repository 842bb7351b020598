// lion_update.h — the per-shard update kernel of keras.optimizers.Lion (train/lion.h): its
// per-element rule after the step's preparation (kernels/optimizer.h), on the variable's shard
// and its slots' shards.
//
// Example (per local shard, in train/lion.cc):
//   lion_update(kind, {step, LionParams{…}});
#pragma once

#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {

/// keras.optimizers.Lion: slots [momentum].
struct LionParams {
  double beta_1, beta_2;
};
using LionUpdate = OptimizerUpdate<LionParams>;

void lion_update_cpu(const LionUpdate& args);

inline KernelOp<void(const LionUpdate&)> lion_update{"lion_update", &lion_update_cpu};

}  // namespace meshlayout
