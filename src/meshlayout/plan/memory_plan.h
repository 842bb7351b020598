// memory_plan.h — `meshlayout plan --batch N --seq N …`: everything a device would hold to
// train or serve a model, from the tensors' shapes and the rules alone (nothing allocated):
// its shards of the weights, gradients and optimizer slots (training_plan.h), the activations
// of one training step (the forward's saved tensors and the backward's working set, with or
// without recomputing each block), the key/value cache of generation, the temporaries of the
// largest reshard, the peak, and whether it fits a device memory.
//
// Weights, gradients and slots come from the model's variable list (shapes and layouts of every
// tensor, whatever the family: a mixture-of-experts model's expert tensors need no code here);
// the activations and the cache from the family's shapes (ActivationShapes), since they depend
// on the batch and the sequence, not on any variable.
//
// Example:
//   MemoryPlan m = plan_memory(plan, map, {.optimizer = optimizer.get(), .batch = 8, .seq = 2048,
//                                          .activations = llama_activation_shapes(config),
//                                          .device_memory = 80ull << 30});
//   m.devices[3].peak;   // the most device 3 holds at once
//   m.devices[3].fits;   // peak <= 80 GiB
//   out << render_memory_text(m, plan.mesh);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshlayout {

/// What one device holds, by kind (bytes). The bar chart of `plan --html` and the table of
/// `plan --batch` read these.
struct DeviceMemoryPlan {
  uint64_t weights = 0;       // its shards of every weight, in the dtype the model holds them
  uint64_t gradients = 0;     // one per trained weight, in the weight's layout (training)
  uint64_t slots = 0;         // the optimizer's slots (Adafactor factored, ZeRO-1 sharded)
  uint64_t activations = 0;   // the training step's activation peak (saved + working set)
  uint64_t cache = 0;         // the key/value cache of generation (every layer, k and v)
  uint64_t reshard_temp = 0;  // the largest reshard's temporary (its target shard)
  uint64_t peak = 0;          // the most held at once: max(training, generation) + reshard_temp
  bool fits = true;           // peak <= the device memory (true when none was given)
};

}  // namespace meshlayout
