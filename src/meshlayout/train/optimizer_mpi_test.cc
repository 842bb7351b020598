// Optimizer steps under mpirun (np 2 and 4): variables sharded across processes give the
// float64 reference's values (SGD, Adam, AdamW, RMSprop, Adagrad, Lion, Adafactor), with
// clipnorm and global_clipnorm (norms summed across processes, each box counted once), and
// every slot shard stays on its variable's device.
// ZeRO-1 (shard_slots_over) across processes: bit-identical to the unsharded optimizer, with
// the data axis spanning processes (major) or within them (minor).
#include <gtest/gtest.h>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/name_scope.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/train/optimizer.h"
#include "meshlayout/train/optimizer_test_util.h"

namespace meshlayout {
namespace {

void run_and_check(const std::string& kind, const OptimizerOptions& options) {
  SCOPED_TRACE(kind);
  auto rt = default_runtime();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  std::vector<VariablePtr> vars;
  {
    NameScope scope("dense");
    vars.push_back(std::make_shared<Variable>(VariableSpec{
        .name = "kernel", .shape = {6, 10}, .initializer = Initializer::random_normal()}));
    vars.push_back(std::make_shared<Variable>(
        VariableSpec{.name = "bias", .shape = {10}, .initializer = Initializer::random_normal()}));
  }
  vars[0]->materialize(TensorLayout({"data", "model"}, mesh));  // uneven on np 4 (10 / 4)
  vars[1]->materialize(TensorLayout({None}, mesh));
  std::vector<RefVar> ref_vars;
  for (const VariablePtr& v : vars)
    ref_vars.push_back({to_doubles(v->value().gather()), v->name(), {}, v->shape()});
  auto opt = make_optimizer(kind, options);
  RefOptimizer ref(kind, options);
  for (int step = 0; step < 4; ++step) {
    std::vector<Array> grads;
    std::vector<std::vector<double>> ref_grads;
    for (size_t i = 0; i < vars.size(); ++i) {
      HostTensor g = test_gradient(vars[i]->shape(), DType::kF32, step, static_cast<int>(i));
      ref_grads.push_back(to_doubles(g));
      grads.push_back(distribute_tensor(g, vars[i]->value().layout()));
    }
    const Array* gp[] = {&grads[0], &grads[1]};
    opt->apply(gp, vars);
    ref.step(ref_vars, ref_grads);
  }
  for (size_t i = 0; i < vars.size(); ++i) {
    EXPECT_LT(max_rel_error(to_doubles(vars[i]->value().gather()), ref_vars[i].theta), 2e-5)
        << vars[i]->path();
    std::vector<VariablePtr> slots = opt->slots_of(*vars[i]);
    for (size_t s = 0; s < slots.size(); ++s) {
      EXPECT_LT(max_rel_error(to_doubles(slots[s]->value().gather()), ref_vars[i].slots[s]), 2e-5)
          << slots[s]->path();
      for (const Array::Shard& shard : slots[s]->value().local_shards())
        EXPECT_TRUE(rt->is_local(shard.device_id));
      // Adafactor's r and c hold the rows and columns of the variable's boxes.
      if (kind != "adafactor") {
        EXPECT_EQ(slots[s]->value().local_bytes(), vars[i]->value().local_bytes());
      }
    }
  }
}

TEST(OptimizerMpiTest, AdamWithGlobalClipnormMatchesTheReference) {
  run_and_check("adam", {.global_clipnorm = 1.0, .amsgrad = true});
}

TEST(OptimizerMpiTest, SgdNesterovWithClipnormMatchesTheReference) {
  run_and_check("sgd", {.learning_rate = 0.05, .clipnorm = 0.8, .momentum = 0.9, .nesterov = true});
}

TEST(OptimizerMpiTest, AdamWMatchesTheReference) {
  run_and_check("adamw", {.learning_rate = 0.01, .weight_decay = 0.1});
}

TEST(OptimizerMpiTest, RmspropMatchesTheReference) {
  run_and_check("rmsprop", {.learning_rate = 0.01,
                            .global_clipnorm = 1.0,
                            .momentum = 0.9,
                            .arguments = {{"centered", true}}});
  run_and_check("rmsprop", {.clipnorm = 0.8});
}

TEST(OptimizerMpiTest, AdagradMatchesTheReference) {
  run_and_check("adagrad", {.learning_rate = 0.05,
                            .weight_decay = 0.1,
                            .arguments = {{"initial_accumulator_value", 0.2}}});
}

TEST(OptimizerMpiTest, LionMatchesTheReference) {
  run_and_check("lion", {.weight_decay = 0.1, .global_clipnorm = 1.0, .beta_1 = 0.8});
}

// The kernel's row means cross the 'model' axis, its column means the 'data' axis (across
// processes); the RMS of the variable and of the update span both processes.
TEST(OptimizerMpiTest, AdafactorMatchesTheReference) {
  run_and_check("adafactor", {});
  run_and_check("adafactor", {.learning_rate = 0.05,
                              .weight_decay = 0.1,
                              .global_clipnorm = 1.0,
                              .arguments = {{"clip_threshold", 0.5}}});
}

// Variables replicated, over model, over both, uneven, on `mesh` (axes "data", "model").
std::vector<VariableCase> zero1_cases(const DeviceMesh& mesh) {
  const int64_t m = mesh.axis_size("model");
  return {
      {"replicated", {6, 4}, TensorLayout({None, None}, mesh)},
      {"columns", {3, 2 * m}, TensorLayout({None, "model"}, mesh)},
      {"both_axes", {4, 10}, TensorLayout({"data", "model"}, mesh)},
      {"uneven", {7, m + 1}, TensorLayout({None, "model"}, mesh)},
      {"odd_bias", {5}, TensorLayout({None}, mesh)},
      {"not_nested", {m + 2}, TensorLayout({"model"}, mesh)},
  };
}

void run_zero1(const std::string& kind, const OptimizerOptions& options) {
  auto rt = default_runtime();
  const int64_t n = rt->global_device_count();
  for (const DeviceMesh& mesh :
       {DeviceMesh({2, n / 2}, {"data", "model"}), DeviceMesh({n / 2, 2}, {"model", "data"})}) {
    SCOPED_TRACE(mesh.to_string());
    auto zero = expect_zero1_matches(kind, options, "data", zero1_cases(mesh), 3);
    for (const VariablePtr& v : zero->variables()) {
      for (const Array::Shard& shard : v->value().local_shards())
        EXPECT_TRUE(rt->is_local(shard.device_id));
    }
  }
}

TEST(OptimizerMpiTest, Zero1AdamWithGlobalClipnormIsBitIdentical) {
  run_zero1("adam", {.global_clipnorm = 1.0, .amsgrad = true});
}

TEST(OptimizerMpiTest, Zero1SgdMomentumIsBitIdentical) {
  run_zero1("sgd", {.learning_rate = 0.05, .clipnorm = 0.8, .momentum = 0.9, .nesterov = true});
}

TEST(OptimizerMpiTest, Zero1AdamWIsBitIdentical) {
  run_zero1("adamw", {.learning_rate = 0.01, .weight_decay = 0.1});
}

TEST(OptimizerMpiTest, Zero1RmspropAdagradLionAreBitIdentical) {
  run_zero1("rmsprop", {.learning_rate = 0.01, .momentum = 0.9, .arguments = {{"centered", true}}});
  run_zero1("adagrad", {.learning_rate = 0.05, .arguments = {{"initial_accumulator_value", 0.3}}});
  run_zero1("lion", {.weight_decay = 0.1, .clipnorm = 0.8});
}

}  // namespace
}  // namespace meshlayout
