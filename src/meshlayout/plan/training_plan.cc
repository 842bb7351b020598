// training_plan.cc — see training_plan.h.
#include "meshlayout/plan/training_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <span>
#include <utility>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout_map/layout_map.h"

namespace meshlayout {

TrainingPlan plan_training(const CheckpointPlan& plan, const LayoutMap& map,
                           const Optimizer& optimizer) {
  optimizer.check_shard_slots_over(plan.mesh);
  TrainingPlan out{.optimizer = optimizer.name(),
                   .slot_names = optimizer.slot_names(),
                   .zero1_axis = optimizer.shard_slots_over()};
  const size_t devices = static_cast<size_t>(plan.mesh.size());
  out.devices.resize(devices);
  // Tensors of one shape and layout (the same kernel in every layer) hold the same bytes on
  // every device, and so do their slots: each distinct (shape, layout) is computed once and
  // counted as many times as it occurs (a 405B-shaped model on 16,384 devices: ~10 instead of
  // 1,137 tensors of 16,384 boxes each).
  struct Distinct {
    SlotFootprint footprint{.layout = TensorLayout::replicated(0)};
    uint64_t count = 0;
  };
  std::map<std::pair<Shape, std::string>, Distinct> distinct;
  for (const PlannedTensor& t : plan.tensors) {
    if (!t.ok() || !t.info->dtype || !is_floating(*t.info->dtype)) continue;
    const int rank = static_cast<int>(t.info->shape.size());
    const TensorLayout layout =
        map.get(t.info->name).value_or(TensorLayout::replicated(rank, plan.mesh));
    Distinct& d = distinct[{t.info->shape, layout.to_string()}];
    if (d.count == 0) {
      (void)ShardGeometry(layout, t.info->shape, {}, t.info->name);  // refused by name
      d.footprint = SlotFootprint{t.info->shape, DType::kF32, layout};
    }
    ++d.count;
    ++out.trained_tensors;
  }
  const std::vector<int64_t>& ids = plan.mesh.device_ids();
  for (const auto& [key, d] : distinct) {
    const ShardGeometry g(d.footprint.layout, d.footprint.shape);
    for (size_t p = 0; p < devices; ++p) {
      const uint64_t bytes =
          d.count * static_cast<uint64_t>(g.box(static_cast<int64_t>(p)).num_elements()) * 4;
      out.devices[p].weights += bytes;
      out.devices[p].gradients += bytes;
    }
    const std::map<int64_t, int64_t> slots =
        optimizer.slot_bytes_per_device(std::span<const SlotFootprint>(&d.footprint, 1));
    for (size_t p = 0; p < devices; ++p) {
      const auto it = slots.find(ids[p]);
      if (it != slots.end()) out.devices[p].slots += d.count * static_cast<uint64_t>(it->second);
    }
  }
  return out;
}

std::string render_training_text(const TrainingPlan& training, const DeviceMesh& mesh) {
  std::string out = fmt::format(
      "\ntraining with {} ({} tensors as float32; slots per variable: {}; activations not "
      "counted):\n",
      training.optimizer, training.trained_tensors,
      training.slot_names.empty() ? std::string("none")
                                  : fmt::format("{}", fmt::join(training.slot_names, ", ")));
  if (training.zero1_axis) {
    out += fmt::format("ZeRO-1 on: each slot sharded further over axis '{}' ({} ways)\n",
                       *training.zero1_axis, mesh.axis_size(*training.zero1_axis));
  }
  size_t width = 6;
  for (const std::string& d : mesh.devices()) width = std::max(width, d.size());
  out += fmt::format("  {:<{}}  {:>10}  {:>10}  {:>10}  {:>10}\n", "device", width, "weights",
                     "gradients", "slots", "total");
  uint64_t most = 0;
  size_t most_at = 0;
  for (size_t p = 0; p < training.devices.size(); ++p) {
    const TrainingPlan::Device& d = training.devices[p];
    out += fmt::format("  {:<{}}  {:>10}  {:>10}  {:>10}  {:>10}\n", mesh.devices()[p], width,
                       format_bytes(d.weights), format_bytes(d.gradients), format_bytes(d.slots),
                       format_bytes(d.total()));
    if (d.total() > most) most = d.total(), most_at = p;
  }
  out += fmt::format("  the most, {} ({} bytes), is on {}\n", format_bytes(most), most,
                     training.devices.empty() ? std::string("-") : mesh.devices()[most_at]);
  return out;
}

nlohmann::json training_json(const TrainingPlan& training, const DeviceMesh& mesh) {
  nlohmann::json devices = nlohmann::json::array();
  for (size_t p = 0; p < training.devices.size(); ++p) {
    const TrainingPlan::Device& d = training.devices[p];
    devices.push_back({{"device", mesh.devices()[p]},
                       {"weights", d.weights},
                       {"gradients", d.gradients},
                       {"slots", d.slots},
                       {"total", d.total()}});
  }
  nlohmann::json zero1 = nullptr;
  if (training.zero1_axis) {
    zero1 = {{"axis", *training.zero1_axis}, {"axis_size", mesh.axis_size(*training.zero1_axis)}};
  }
  return {{"optimizer", training.optimizer},
          {"slot_names", training.slot_names},
          {"tensors", training.trained_tensors},
          {"zero1", zero1},
          {"devices", devices}};
}

}  // namespace meshlayout
