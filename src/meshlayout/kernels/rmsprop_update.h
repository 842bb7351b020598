// rmsprop_update.h — the per-shard update kernel of keras.optimizers.RMSprop (train/rmsprop.h): its
// per-element rule after the step's preparation (kernels/optimizer.h), on the variable's shard
// and its slots' shards.
//
// Example (per local shard, in train/rmsprop.cc):
//   rmsprop_update(kind, {step, RmspropParams{…}});
#pragma once

#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {

/// keras.optimizers.RMSprop: slots [velocity] (+ momentum when momentum > 0) (+
/// average_gradient when centered).
struct RmspropParams {
  double rho, momentum, epsilon;
  bool centered;
};
using RmspropUpdate = OptimizerUpdate<RmspropParams>;

void rmsprop_update_cpu(const RmspropUpdate& args);

inline KernelOp<void(const RmspropUpdate&)> rmsprop_update{"rmsprop_update", &rmsprop_update_cpu};

}  // namespace meshlayout
