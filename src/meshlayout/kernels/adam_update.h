// adam_update.h — the per-shard update kernel of keras.optimizers.Adam and AdamW (train/adam.h):
// its per-element rule after the step's preparation (kernels/optimizer.h), on the variable's shard
// and its slots' shards.
//
// Example (per local shard, in train/adam.cc):
//   adam_update(kind, {step, AdamParams{…}});
#pragma once

#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {

/// keras.optimizers.Adam / AdamW: slots [momentum, velocity] (+ velocity_hat with amsgrad).
struct AdamParams {
  double beta_1, beta_2, epsilon;
  bool amsgrad;
};
using AdamUpdate = OptimizerUpdate<AdamParams>;

void adam_update_cpu(const AdamUpdate& args);

inline KernelOp<void(const AdamUpdate&)> adam_update{"adam_update", &adam_update_cpu};

}  // namespace meshlayout
