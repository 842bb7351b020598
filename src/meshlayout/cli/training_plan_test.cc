// plan --optimizer: the planned per-device bytes of weights, gradients and slots are exactly
// what a model built under the same rules and an optimizer built over it hold; the text and
// JSON forms; an unknown optimizer is refused before anything is read. ZeRO-1 (--zero1,
// --shard-slots-over): the planned slots are what a ZeRO-1 optimizer builds, half of them on a
// batch=2 mesh, stated in text and JSON; an axis not in the mesh is refused by name.
#include "meshlayout/plan/training_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "meshlayout/cli/plan_command.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/llama.h"

namespace meshlayout::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TrainingPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
    path_ = (fs::temp_directory_path() /
             ("training_plan_" + std::to_string(::getpid()) + ".safetensors"))
                .string();
  }
  void TearDown() override {
    fs::remove(path_);
    reset_device_count();
  }
  std::string path_;
};

TEST_F(TrainingPlanTest, PlannedBytesAreWhatTheModelAndItsOptimizerHold) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  const LlamaConfig config{.vocab_size = 40,
                           .hidden_size = 16,
                           .intermediate_size = 24,
                           .num_hidden_layers = 2,
                           .num_attention_heads = 4,
                           .num_key_value_heads = 2,
                           .head_dim = 4,
                           .tie_word_embeddings = false,
                           .max_position_embeddings = 16};
  const LayoutMap rules = llama_layout_map(mesh);
  LlamaModel model(config, rules);
  std::vector<NamedArray> named;
  for (const VariablePtr& v : model.variables()) named.push_back({v->path(), &v->value()});
  save_arrays(path_, named);

  for (const char* name : {"adam", "sgd"}) {
    SCOPED_TRACE(name);
    auto optimizer = make_optimizer(
        name, std::string(name) == "sgd" ? OptimizerOptions{.momentum = 0.9} : OptimizerOptions{});
    const Checkpoint checkpoint = Checkpoint::open(path_);
    const CheckpointPlan plan = plan_checkpoint(checkpoint, rules);
    const TrainingPlan training = plan_training(plan, rules, *optimizer);
    EXPECT_EQ(training.trained_tensors, model.variables().size());

    const std::vector<VariablePtr> variables = model.variables();
    optimizer->build(variables);
    std::map<int64_t, uint64_t> weights, slots;
    for (const VariablePtr& v : variables) {
      for (const Array::Shard& s : v->value().local_shards())
        weights[s.device_id] += s.buffer.size();
      for (const VariablePtr& slot : optimizer->slots_of(*v)) {
        for (const Array::Shard& s : slot->value().local_shards())
          slots[s.device_id] += s.buffer.size();
      }
    }
    for (int64_t p = 0; p < mesh.size(); ++p) {
      const int64_t id = mesh.device_ids()[static_cast<size_t>(p)];
      EXPECT_EQ(training.devices[static_cast<size_t>(p)].weights, weights[id]) << p;
      EXPECT_EQ(training.devices[static_cast<size_t>(p)].gradients, weights[id]) << p;
      EXPECT_EQ(training.devices[static_cast<size_t>(p)].slots, slots[id]) << p;
      EXPECT_GT(slots[id], 0u);
    }
  }

  std::ostringstream text, json;
  EXPECT_EQ(run_plan({.path = path_,
                      .rules_path = std::string(MESHLAYOUT_SOURCE_DIR) +
                                    "/examples/rules/llama_keras_hub.json",
                      .mesh = "batch=2,model=4",
                      .optimizer = "adamw"},
                     text),
            0);
  EXPECT_THAT(
      text.str(),
      HasSubstr(
          "training with adamw (21 tensors as float32; slots per variable: momentum, velocity"));
  EXPECT_THAT(text.str(), ::testing::ContainsRegex("cpu:7 +[0-9.]+ KiB +[0-9.]+ KiB +[0-9.]+ KiB"));
  EXPECT_EQ(run_plan({.path = path_,
                      .rules_path = std::string(MESHLAYOUT_SOURCE_DIR) +
                                    "/examples/rules/llama_keras_hub.json",
                      .mesh = "batch=2,model=4",
                      .json = true,
                      .optimizer = "adam"},
                     json),
            0);
  const nlohmann::json j = nlohmann::json::parse(json.str());
  EXPECT_EQ(j.at("training").at("optimizer"), "adam");
  EXPECT_EQ(j.at("training").at("devices").size(), 8u);
  EXPECT_EQ(j.at("training").at("devices")[0].at("total").get<uint64_t>(),
            j.at("training").at("devices")[0].at("weights").get<uint64_t>() * 4);
}

TEST_F(TrainingPlanTest, Zero1PlansHalfTheSlotsAndSaysSo) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  const LlamaConfig config{.vocab_size = 40,
                           .hidden_size = 16,
                           .intermediate_size = 24,
                           .num_hidden_layers = 2,
                           .num_attention_heads = 4,
                           .num_key_value_heads = 2,
                           .head_dim = 4,
                           .tie_word_embeddings = false,
                           .max_position_embeddings = 16};
  // Megatron's rules shard nothing over "batch" (keras-hub's shard most kernels over it already).
  const std::string rules_path =
      std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/llama_megatron.json";
  RulesFile file = load_rules_file(rules_path);
  file.mesh = mesh;
  const LayoutMap rules = file.to_layout_map();
  LlamaModel model(config, rules);
  std::vector<NamedArray> named;
  for (const VariablePtr& v : model.variables()) named.push_back({v->path(), &v->value()});
  save_arrays(path_, named);

  // The plan's slots are what a ZeRO-1 optimizer builds, half of the unsharded one's.
  const Checkpoint checkpoint = Checkpoint::open(path_);
  const CheckpointPlan plan = plan_checkpoint(checkpoint, rules);
  auto zero = make_optimizer("adam", {.shard_slots_over = "batch"});
  const TrainingPlan plain = plan_training(plan, rules, *make_optimizer("adam"));
  const TrainingPlan sharded = plan_training(plan, rules, *zero);
  EXPECT_EQ(sharded.zero1_axis, "batch");
  EXPECT_EQ(plain.zero1_axis, std::nullopt);
  const std::vector<VariablePtr> variables = model.variables();
  zero->build(variables);
  std::map<int64_t, uint64_t> slots;
  for (const VariablePtr& v : variables) {
    for (const VariablePtr& slot : zero->slots_of(*v)) {
      for (const Array::Shard& s : slot->value().local_shards())
        slots[s.device_id] += s.buffer.size();
    }
  }
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const size_t i = static_cast<size_t>(p);
    EXPECT_EQ(sharded.devices[i].slots, slots[mesh.device_ids()[i]]) << p;
    EXPECT_EQ(sharded.devices[i].slots * 2, plain.devices[i].slots) << p;
    EXPECT_EQ(sharded.devices[i].weights, plain.devices[i].weights) << p;
  }

  std::ostringstream text, json, json_plain;
  EXPECT_EQ(run_plan({.path = path_,
                      .rules_path = rules_path,
                      .mesh = "batch=2,model=4",
                      .optimizer = "adam",
                      .zero1 = true},
                     text),
            0);
  EXPECT_THAT(text.str(),
              HasSubstr("ZeRO-1 on: each slot sharded further over axis 'batch' (2 ways)"));
  EXPECT_EQ(run_plan({.path = path_,
                      .rules_path = rules_path,
                      .mesh = "batch=2,model=4",
                      .json = true,
                      .optimizer = "adam",
                      .shard_slots_over = "batch"},
                     json),
            0);
  EXPECT_EQ(run_plan({.path = path_,
                      .rules_path = rules_path,
                      .mesh = "batch=2,model=4",
                      .json = true,
                      .optimizer = "adam"},
                     json_plain),
            0);
  const nlohmann::json j = nlohmann::json::parse(json.str()).at("training");
  const nlohmann::json k = nlohmann::json::parse(json_plain.str()).at("training");
  EXPECT_EQ(j.at("zero1").at("axis"), "batch");
  EXPECT_EQ(j.at("zero1").at("axis_size"), 2);
  EXPECT_TRUE(k.at("zero1").is_null());
  for (size_t p = 0; p < 8; ++p) {
    EXPECT_EQ(j.at("devices")[p].at("slots").get<uint64_t>() * 2,
              k.at("devices")[p].at("slots").get<uint64_t>());
  }
}

TEST_F(TrainingPlanTest, Zero1OverAnAxisNotInTheMeshIsRefusedByName) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  std::vector<NamedArray> named;
  const Array w =
      distribute_tensor(HostTensor(DType::kF32, {4, 4}), TensorLayout({None, None}, mesh));
  named.push_back({"w", &w});
  save_arrays(path_, named);
  const std::string rules_path =
      std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/llama_keras_hub.json";
  std::ostringstream out;
  try {
    run_plan({.path = path_,
              .rules_path = rules_path,
              .mesh = "batch=2,model=4",
              .optimizer = "adam",
              .shard_slots_over = "data"},
             out);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'data'"));
    EXPECT_THAT(e.what(), HasSubstr("['batch', 'model']"));
  }
  EXPECT_THROW(
      run_plan({.path = path_, .rules_path = rules_path, .mesh = "batch=2,model=4", .zero1 = true},
               out),
      ValueError);  // no --optimizer
  EXPECT_THROW(run_plan({.path = path_,
                         .rules_path = rules_path,
                         .mesh = "batch=2,model=4",
                         .optimizer = "adam",
                         .zero1 = true,
                         .shard_slots_over = "model"},
                        out),
               ValueError);  // two axes asked for
  EXPECT_EQ(out.str(), "");
}

TEST_F(TrainingPlanTest, AnUnknownOptimizerIsRefusedByName) {
  std::ostringstream out;
  try {
    run_plan({.path = "/nonexistent.safetensors",
              .rules_path = "/nonexistent.json",
              .optimizer = "nadam"},
             out);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("nadam"));
  }
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace meshlayout::cli
