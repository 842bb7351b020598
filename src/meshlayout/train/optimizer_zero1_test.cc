// ZeRO-1 (OptimizerOptions::shard_slots_over) on a 2 x 4 mesh: the slot layout rule, steps
// bit-identical to the unsharded optimizer (SGD momentum, Adam, AdamW, RMSprop, Adagrad, Lion;
// clipping, weight decay),
// the slots' bytes per device halved for variables replicated over the data axis (by
// slot_bytes_per_device and by the built slots' shards), the slicing local where boxes nest,
// state interchangeable with an unsharded optimizer, and an unknown axis refused.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/train/optimizer_test_util.h"
#include "meshlayout/train/optimizers.h"

namespace meshlayout {
namespace {

class OptimizerZero1Test : public NnTest {
 protected:
  // Replicated over "data" unless noted.
  std::vector<VariableCase> cases() const {
    return {
        {"replicated", {6, 4}, TensorLayout({None, None}, mesh_)},
        {"columns", {5, 8}, TensorLayout({None, "model"}, mesh_)},
        {"rows", {8, 3}, TensorLayout({"model", None}, mesh_)},
        {"both_axes", {8, 12}, TensorLayout({"data", "model"}, mesh_)},  // already over data
        {"uneven", {7, 6}, TensorLayout({None, "model"}, mesh_)},
        {"bias", {10}, TensorLayout({None}, mesh_)},
        {"odd_bias", {5}, TensorLayout({None}, mesh_)},
        {"not_nested", {10}, TensorLayout({"model"}, mesh_)},
        {"scalar", {}, TensorLayout({}, mesh_)},
    };
  }
};

TEST_F(OptimizerZero1Test, SlotLayoutRule) {
  auto slot = [&](const TensorLayout& l, const Shape& s) {
    return zero1_slot_layout(l, s, "data");
  };
  // The first dimension the combined shard count divides; the axis goes minor.
  EXPECT_EQ(slot(TensorLayout({None, None}, mesh_), {6, 4}), TensorLayout({"data", None}, mesh_));
  EXPECT_EQ(slot(TensorLayout({None, "model"}, mesh_), {5, 8}),
            TensorLayout({None, DimSharding({"model", "data"})}, mesh_));
  EXPECT_EQ(slot(TensorLayout({"model", None}, mesh_), {8, 3}),
            TensorLayout({DimSharding({"model", "data"}), None}, mesh_));
  // Already over the axis, or a scalar: unchanged.
  EXPECT_EQ(slot(TensorLayout({"data", "model"}, mesh_), {8, 12}),
            TensorLayout({"data", "model"}, mesh_));
  EXPECT_EQ(slot(TensorLayout({None, DimSharding({"model", "data"})}, mesh_), {3, 3}),
            TensorLayout({None, DimSharding({"model", "data"})}, mesh_));
  EXPECT_EQ(slot(TensorLayout({}, mesh_), {}), TensorLayout({}, mesh_));
  // No even split: the first unsharded dimension, uneven; none unsharded: dimension 0.
  EXPECT_EQ(slot(TensorLayout({"model", None}, mesh_), {6, 3}),
            TensorLayout({"model", "data"}, mesh_));
  EXPECT_EQ(slot(TensorLayout({None}, mesh_), {5}), TensorLayout({"data"}, mesh_));
  EXPECT_EQ(slot(TensorLayout({"model"}, mesh_), {10}),
            TensorLayout({DimSharding({"model", "data"})}, mesh_));
  // Over "model" instead: {None, "data"} becomes {"model", "data"}.
  EXPECT_EQ(zero1_slot_layout(TensorLayout({None, "data"}, mesh_), {8, 4}, "model"),
            TensorLayout({"model", "data"}, mesh_));
}

TEST_F(OptimizerZero1Test, AdamStepsAreBitIdenticalToUnsharded) {
  expect_zero1_matches("adam", {.amsgrad = true}, "data", cases(), 4);
}

TEST_F(OptimizerZero1Test, AdamWithGlobalClipnormIsBitIdentical) {
  // The global norm is taken over the whole gradients, before they are sliced.
  expect_zero1_matches("adam", {.learning_rate = 0.01, .global_clipnorm = 0.5}, "data", cases(), 3);
}

TEST_F(OptimizerZero1Test, SgdMomentumStepsAreBitIdentical) {
  expect_zero1_matches("sgd",
                       {.learning_rate = 0.05, .clipnorm = 0.8, .momentum = 0.9, .nesterov = true},
                       "data", cases(), 4);
  expect_zero1_matches("sgd", {.momentum = 0.5}, "data", cases(), 2);
}

TEST_F(OptimizerZero1Test, AdamWStepsAreBitIdentical) {
  expect_zero1_matches("adamw", {.learning_rate = 0.01, .weight_decay = 0.1, .clipvalue = 1.0},
                       "data", cases(), 4);
}

TEST_F(OptimizerZero1Test, RmspropStepsAreBitIdentical) {
  expect_zero1_matches("rmsprop",
                       {.learning_rate = 0.01, .momentum = 0.9, .arguments = {{"centered", true}}},
                       "data", cases(), 4);
  expect_zero1_matches("rmsprop", {.global_clipnorm = 0.5, .arguments = {{"rho", 0.8}}}, "data",
                       cases(), 3);
}

TEST_F(OptimizerZero1Test, AdagradStepsAreBitIdentical) {
  // The accumulators are born holding initial_accumulator_value in either layout.
  expect_zero1_matches("adagrad",
                       {.learning_rate = 0.05,
                        .weight_decay = 0.1,
                        .arguments = {{"initial_accumulator_value", 0.3}}},
                       "data", cases(), 4);
}

TEST_F(OptimizerZero1Test, LionStepsAreBitIdentical) {
  expect_zero1_matches("lion", {.weight_decay = 0.1, .clipnorm = 0.8, .beta_1 = 0.8}, "data",
                       cases(), 4);
}

TEST_F(OptimizerZero1Test, SgdWithoutMomentumHasNoSlotsAndStillMatches) {
  auto zero = expect_zero1_matches("sgd", {}, "data", cases(), 2);
  EXPECT_EQ(zero->variables().size(), 2u);
}

TEST_F(OptimizerZero1Test, ShardingOverTheModelAxisAlsoMatches) {
  expect_zero1_matches("adamw", {}, "model", cases(), 2);
}

TEST_F(OptimizerZero1Test, EachDeviceHoldsHalfTheSlotsOfVariablesReplicatedOverData) {
  std::vector<VariableCase> even;
  for (const VariableCase& c : cases()) {
    if (c.name == "replicated" || c.name == "columns" || c.name == "rows" || c.name == "bias")
      even.push_back(c);
  }
  std::vector<SlotFootprint> footprints;
  std::vector<VariablePtr> vars;
  for (const VariableCase& c : even) {
    footprints.push_back({c.shape, DType::kF32, c.layout});
    vars.push_back(std::make_shared<Variable>(VariableSpec{.name = c.name, .shape = c.shape}));
    vars.back()->materialize(c.layout);
  }
  Adam plain;
  Adam zero({.shard_slots_over = "data"});
  zero.build(vars);
  const std::map<int64_t, int64_t> full = plain.slot_bytes_per_device(footprints);
  const std::map<int64_t, int64_t> sharded = zero.slot_bytes_per_device(footprints);
  ASSERT_EQ(full.size(), 8u);
  ASSERT_EQ(sharded.size(), 8u);
  // The built slots' local shards, per device.
  std::map<int64_t, int64_t> built;
  for (const VariablePtr& v : zero.variables()) {
    if (v->path() == zero.name() + "/iteration" || v->path() == zero.name() + "/learning_rate")
      continue;
    for (const Array::Shard& s : v->value().local_shards())
      built[s.device_id] += static_cast<int64_t>(s.buffer.size());
  }
  for (const auto& [device, bytes] : full) {
    EXPECT_GT(bytes, 0) << device;
    EXPECT_EQ(sharded.at(device) * 2, bytes) << device;
    EXPECT_EQ(built[device], sharded.at(device)) << device;
  }
  // A variable already sharded over "data" keeps its slot bytes.
  const std::vector<SlotFootprint> both = {
      {{8, 12}, DType::kF32, TensorLayout({"data", "model"}, mesh_)}};
  EXPECT_EQ(zero.slot_bytes_per_device(both), plain.slot_bytes_per_device(both));
}

TEST_F(OptimizerZero1Test, SlicingToTheSlotLayoutIsLocalWhenBoxesNest) {
  for (const VariableCase& c : cases()) {
    SCOPED_TRACE(c.name);
    auto v = std::make_shared<Variable>(VariableSpec{.name = c.name, .shape = c.shape});
    v->materialize(c.layout);
    const ReshardPlan plan =
        plan_distribute(v->value(), zero1_slot_layout(c.layout, c.shape, "data"));
    if (c.name == "not_nested") {
      EXPECT_GT(plan.bytes_moved, 0);  // model block [0, 3) vs slot block [2, 4): bytes move
    } else {
      EXPECT_EQ(plan.bytes_moved, 0);
    }
  }
}

TEST_F(OptimizerZero1Test, StateMovesBetweenZeroAndUnshardedOptimizers) {
  // Train 2 steps with ZeRO, copy its variables into an unsharded optimizer by path (as a
  // checkpoint load reshards into the target's layouts), continue both: bit-identical.
  for (const bool zero_first : {true, false}) {
    SCOPED_TRACE(zero_first ? "zero -> plain" : "plain -> zero");
    // One explicit name: state moves by path (two unnamed optimizers are adam and adam_1).
    OptimizerOptions first_options{.name = "adam", .amsgrad = true},
        second_options{.name = "adam", .amsgrad = true};
    (zero_first ? first_options : second_options).shard_slots_over = "data";
    std::vector<VariablePtr> vars;
    for (const VariableCase& c : cases()) {
      vars.push_back(std::make_shared<Variable>(VariableSpec{
          .name = c.name, .shape = c.shape, .initializer = Initializer::random_normal()}));
      vars.back()->materialize(c.layout);
    }
    auto grads_at = [&](int step) {
      std::vector<Array> g;
      for (size_t i = 0; i < vars.size(); ++i) {
        g.push_back(distribute_tensor(
            test_gradient(vars[i]->shape(), DType::kF32, step, static_cast<int>(i)),
            vars[i]->value().layout()));
      }
      return g;
    };
    auto first = make_optimizer("adam", first_options);
    auto second = make_optimizer("adam", second_options);
    for (int step = 0; step < 2; ++step) {
      std::vector<Array> g = grads_at(step);
      std::vector<const Array*> gp;
      for (const Array& x : g) gp.push_back(&x);
      first->apply(gp, vars);
    }
    // The second optimizer trains copies of the variables, from the first one's state.
    std::vector<VariablePtr> copy;
    for (const VariablePtr& v : vars) {
      copy.push_back(
          std::make_shared<Variable>(VariableSpec{.name = v->name(), .shape = v->shape()}));
      copy.back()->materialize(v->value().layout());
      reshard_into(v->value(), copy.back()->mutable_value());
    }
    second->build(copy);
    const std::vector<VariablePtr> from = first->variables(), to = second->variables();
    ASSERT_EQ(from.size(), to.size());
    int relaid = 0;  // slots whose layouts differ between the two: 7 variables x 3 slots
    for (size_t k = 0; k < from.size(); ++k) {
      ASSERT_EQ(from[k]->path(), to[k]->path());
      relaid += from[k]->value().layout() == to[k]->value().layout() ? 0 : 1;
      reshard_into(from[k]->value(), to[k]->mutable_value());
    }
    EXPECT_EQ(relaid, 21);
    second->restore_from_variables();
    EXPECT_EQ(second->iterations(), 2);
    for (int step = 2; step < 4; ++step) {
      std::vector<Array> g = grads_at(step);
      std::vector<const Array*> gp;
      for (const Array& x : g) gp.push_back(&x);
      first->apply(gp, vars);
      second->apply(gp, copy);
    }
    for (size_t i = 0; i < vars.size(); ++i) {
      EXPECT_EQ(to_doubles(copy[i]->value().gather()), to_doubles(vars[i]->value().gather()))
          << vars[i]->path();
    }
  }
}

TEST_F(OptimizerZero1Test, AnAxisNotInTheMeshIsAValueError) {
  auto v = std::make_shared<Variable>(VariableSpec{.name = "kernel", .shape = {4, 4}});
  v->materialize(TensorLayout({None, "model"}, mesh_));
  const std::vector<VariablePtr> vars = {v};
  Adam opt({.shard_slots_over = "batch"});
  try {
    opt.build(vars);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'batch'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("['data', 'model']"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(opt.built());
  const std::vector<SlotFootprint> f = {
      {{4, 4}, DType::kF32, TensorLayout({None, "model"}, mesh_)}};
  EXPECT_THROW(opt.slot_bytes_per_device(f), ValueError);
  EXPECT_THROW(zero1_slot_layout(TensorLayout({None, None}, mesh_), {2, 2}, "batch"), ValueError);
  EXPECT_THROW(SGD({.shard_slots_over = ""}), ValueError);
}

}  // namespace
}  // namespace meshlayout
