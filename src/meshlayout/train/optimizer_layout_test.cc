// Slots are born in their variable's layout on a 2 x 4 mesh (sharded, replicated, uneven,
// both axes on one dimension), each device holding exactly its variable's bytes, even when a
// LayoutMap rule would match the slot's own path; slot_bytes_per_device agrees.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/train/optimizer_test_util.h"
#include "meshlayout/train/optimizers.h"

namespace meshlayout {
namespace {

class OptimizerLayoutTest : public NnTest {};

struct Case {
  std::string name;
  Shape shape;
  TensorLayout layout;
};

TEST_F(OptimizerLayoutTest, SlotsAreBornInTheirVariablesLayout) {
  const std::vector<Case> cases = {
      {"sharded", {8, 12}, TensorLayout({"data", "model"}, mesh_)},
      {"columns", {5, 8}, TensorLayout({None, "model"}, mesh_)},
      {"replicated", {3, 4}, TensorLayout({None, None}, mesh_)},
      {"uneven", {7, 6}, TensorLayout({"data", "model"}, mesh_)},
      {"both_axes", {10}, TensorLayout({DimSharding({"data", "model"})}, mesh_)},
      {"scalar", {}, TensorLayout({}, mesh_)},
  };
  std::vector<VariablePtr> vars;
  std::vector<SlotFootprint> footprints;
  {
    NameScope scope("model");
    for (const Case& c : cases) {
      auto v = std::make_shared<Variable>(VariableSpec{.name = c.name, .shape = c.shape});
      v->materialize(c.layout);
      footprints.push_back({c.shape, DType::kF32, c.layout});
      vars.push_back(std::move(v));
    }
  }
  // A rule that would match every slot path (and no variable) must not be consulted.
  LayoutMap rules(mesh_);
  rules[".*_(momentum|velocity|velocity_hat)"] = {None};
  Adam opt({.amsgrad = true});
  {
    LayoutMapScope scope = rules.scope();
    opt.build(vars);
  }
  std::map<int64_t, int64_t> var_bytes;
  for (const VariablePtr& v : vars) {
    SCOPED_TRACE(v->path());
    const Array& x = v->value();
    for (const Array::Shard& s : x.local_shards())
      var_bytes[s.device_id] += static_cast<int64_t>(s.buffer.size());
    const std::vector<VariablePtr> slots = opt.slots_of(*v);
    ASSERT_EQ(slots.size(), 3u);
    for (const VariablePtr& slot : slots) {
      SCOPED_TRACE(slot->path());
      const Array& y = slot->value();
      EXPECT_EQ(y.layout(), x.layout());
      EXPECT_EQ(y.shape(), x.shape());
      EXPECT_EQ(y.dtype(), x.dtype());
      EXPECT_EQ(slot->explicit_layout(), x.layout());
      ASSERT_EQ(y.local_shards().size(), x.local_shards().size());
      for (size_t i = 0; i < x.local_shards().size(); ++i) {
        EXPECT_EQ(y.local_shards()[i].position, x.local_shards()[i].position);
        EXPECT_EQ(y.local_shards()[i].device_id, x.local_shards()[i].device_id);
        EXPECT_EQ(y.local_shards()[i].box, x.local_shards()[i].box);
        EXPECT_EQ(y.local_shards()[i].buffer.size(), x.local_shards()[i].buffer.size());
      }
      EXPECT_EQ(y.local_bytes(), x.local_bytes());
    }
  }
  // Three slots per variable: three times the variables' bytes on every device.
  const std::map<int64_t, int64_t> slot_bytes = opt.slot_bytes_per_device(footprints);
  ASSERT_EQ(slot_bytes.size(), 8u);
  for (const auto& [device, bytes] : var_bytes)
    EXPECT_EQ(slot_bytes.at(device), 3 * bytes) << device;
  // The uneven case: the device at (1, 3) holds rows 4:7 and columns 6:6 (empty).
  EXPECT_EQ(opt.slots_of(*vars[3])[0]->value().shard_at(7)->buffer.size(), 0u);

  // A step on all of them keeps every layout and gives the reference values.
  std::vector<Array> grads;
  std::vector<const Array*> gp;
  std::vector<RefVar> ref_vars;
  std::vector<std::vector<double>> ref_grads;
  for (size_t i = 0; i < vars.size(); ++i) {
    HostTensor g = test_gradient(vars[i]->shape(), DType::kF32, 0, static_cast<int>(i));
    ref_grads.push_back(to_doubles(g));
    ref_vars.push_back({to_doubles(vars[i]->value().gather()), vars[i]->name(), {}});
    grads.push_back(distribute_tensor(g, vars[i]->value().layout()));
  }
  for (const Array& g : grads) gp.push_back(&g);
  RefOptimizer ref("adam", {.amsgrad = true});
  for (int step = 0; step < 3; ++step) {
    opt.apply(gp, vars);
    ref.step(ref_vars, ref_grads);
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_EQ(vars[i]->value().layout(), cases[i].layout);
    EXPECT_LT(max_rel_error(to_doubles(vars[i]->value().gather()), ref_vars[i].theta), 2e-5)
        << cases[i].name;
  }
}

TEST_F(OptimizerLayoutTest, SlotBytesPerDeviceCountsSlotsPerOptimizer) {
  const std::vector<SlotFootprint> f = {
      {{16, 8}, DType::kF32, TensorLayout({"model", None}, mesh_)},
      {{8}, DType::kF64, TensorLayout({None}, mesh_)}};
  // 16x8 over model=4: 4x8 floats = 128 bytes; the bias 64 bytes everywhere.
  for (const auto& [device, bytes] : SGD().slot_bytes_per_device(f)) EXPECT_EQ(bytes, 0) << device;
  for (const auto& [device, bytes] : SGD({.momentum = 0.9}).slot_bytes_per_device(f))
    EXPECT_EQ(bytes, 192) << device;
  for (const auto& [device, bytes] : AdamW().slot_bytes_per_device(f))
    EXPECT_EQ(bytes, 384) << device;
  EXPECT_THROW(Adam().slot_bytes_per_device(
                   std::vector<SlotFootprint>{{{4}, DType::kF32, TensorLayout({None})}}),
               ValueError);
}

}  // namespace
}  // namespace meshlayout
