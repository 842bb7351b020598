// sgd_update.h — the per-shard update kernel of keras.optimizers.SGD (train/sgd.h): its
// per-element rule after the step's preparation (kernels/optimizer.h), on the variable's shard
// and its slots' shards.
//
// Example (per local shard, in train/sgd.cc):
//   sgd_update(kind, {step, SgdParams{…}});
#pragma once

#include "meshlayout/kernels/optimizer.h"

namespace meshlayout {

/// keras.optimizers.SGD: slots [momentum] when momentum != 0, else none.
struct SgdParams {
  double momentum;
  bool nesterov;
};
using SgdUpdate = OptimizerUpdate<SgdParams>;

void sgd_update_cpu(const SgdUpdate& args);

inline KernelOp<void(const SgdUpdate&)> sgd_update{"sgd_update", &sgd_update_cpu};

}  // namespace meshlayout
