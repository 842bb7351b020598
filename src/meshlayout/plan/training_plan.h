// training_plan.h — `meshlayout plan --optimizer NAME`: what training would hold on each device,
// from the checkpoint's headers and the rules alone: its shards of the weights, of their
// gradients (each in its weight's layout) and of the optimizer's slots (born in their
// variable's layouts, Optimizer::slot_bytes_per_device; under ZeRO-1, an optimizer made with
// shard_slots_over, sharded further over that axis), all in float32 as the model trains.
// Integer tensors are not trained and are left out; tensors the plan could not place too.
// Activations depend on the batch and are not counted.
//
// Example:
//   TrainingPlan t = plan_training(plan, map, *make_optimizer("adam"));
//   t.devices[3].slots;   // bytes of Adam's momentum and velocity on the device at position 3
//   plan_training(plan, map, *make_optimizer("adam", {.shard_slots_over = "batch"}));  // ZeRO-1
//   out << render_training_text(t, plan.mesh);
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/plan/checkpoint_plan.h"
#include "meshlayout/train/optimizer.h"

namespace meshlayout {

struct TrainingPlan {
  struct Device {
    uint64_t weights = 0, gradients = 0, slots = 0;
    uint64_t total() const { return weights + gradients + slots; }
  };
  std::string optimizer;                  // its Keras name ("adam")
  std::vector<std::string> slot_names;    // per variable ("momentum", "velocity")
  std::optional<std::string> zero1_axis;  // the optimizer's shard_slots_over (ZeRO-1), if any
  size_t trained_tensors = 0;
  std::vector<Device> devices;  // by mesh position
};

/// The training footprint of every placed floating tensor of `plan` under `map` (the map the
/// plan was made with).
TrainingPlan plan_training(const CheckpointPlan& plan, const LayoutMap& map,
                           const Optimizer& optimizer);

/// A table: device, weights, gradients, optimizer slots, total; then the largest total. Under
/// ZeRO-1 the heading says so, naming the axis and its size.
std::string render_training_text(const TrainingPlan& training, const DeviceMesh& mesh);

/// {"optimizer", "slot_names", "tensors", "zero1": null or {"axis", "axis_size"},
///  "devices": [{"device", "weights", "gradients", "slots", "total"}]}
nlohmann::json training_json(const TrainingPlan& training, const DeviceMesh& mesh);

}  // namespace meshlayout
