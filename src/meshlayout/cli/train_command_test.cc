// `meshlayout train` on a tiny random Llama: the JSON lines give train_llama's losses on a
// replicated model, the same losses under the Megatron and keras-hub rules files; --save then
// --model of the saved directory continues the run exactly (steps, rows and optimizer state);
// --zero1 gives the same losses bit for bit, and its saved state resumes without --zero1 and
// vice versa; and each refusal.
#include "meshlayout/cli/train_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "meshlayout/cli/generate_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/save_directory.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/train/training_state.h"

namespace meshlayout::cli {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kRulesDir = std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/";

class TrainCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    dir_ = fs::temp_directory_path() / ("train_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    testing::write_tiny_llama((dir_ / "llama").string());
    write_token_file(data(),
                     random_token_rows(32, 9, testing::tiny_generate_config().vocab_size, 3));
    clear_session();
  }
  void TearDown() override {
    fs::remove_all(dir_);
    reset_device_count();
  }
  std::string model() const { return (dir_ / "llama").string(); }
  std::string data() const { return (dir_ / "tokens.safetensors").string(); }

  // (step, loss) of each --json line.
  static std::vector<std::pair<int64_t, double>> run_json(TrainCommandOptions o) {
    o.json = true;
    std::ostringstream out;
    EXPECT_EQ(run_train(o, out), 0);
    std::vector<std::pair<int64_t, double>> steps;
    std::istringstream lines(out.str());
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      steps.emplace_back(j.at("step").get<int64_t>(), j.at("loss").get<double>());
    }
    return steps;
  }
  fs::path dir_;
};

TEST_F(TrainCommandTest, JsonLossesAreTrainLlamasOnEveryRulesFile) {
  // The same training in process, replicated on the default mesh.
  LlamaModel reference(testing::tiny_generate_config(),
                       LayoutMap(DeviceMesh({8, 1}, {"batch", "model"})));
  load_hf_llama(HfLlamaCheckpoint::open(model()), reference.variables_by_path());
  auto optimizer = make_optimizer("adamw", {.learning_rate = 1e-2});
  const LlamaTrainResult want =
      train_llama(reference, TokenDataset::open(data()), *optimizer, {.batch_size = 8, .steps = 4});
  for (const char* rules : {"", "llama_megatron.json", "llama_keras_hub.json"}) {
    SCOPED_TRACE(rules);
    clear_session();
    const auto got = run_json({.model_dir = model(),
                               .data_path = data(),
                               .rules_path = *rules ? kRulesDir + rules : "",
                               .mesh = "batch=2,model=4",
                               .batch_size = 8,
                               .steps = 4,
                               .learning_rate = 1e-2});
    ASSERT_EQ(got.size(), 4u);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, static_cast<int64_t>(i));
      EXPECT_NEAR(got[i].second, want.losses[i], 1e-4 * want.losses[i]) << "step " << i;
    }
  }
}

// `train --model DIR` on the other families' directories (issue 27): a Qwen 2, a Qwen 3, a
// Gemma 2 and a Mistral give, under their keras-hub rules files on 2x4, the losses of the same
// training in process on a replicated model (train_llama through the one Trainer).
TEST_F(TrainCommandTest, EveryFamilyTrainsUnderItsKerasHubRules) {
  const std::pair<std::string, std::string> families[] = {{"qwen2", "qwen_keras_hub.json"},
                                                          {"qwen3", "qwen_keras_hub.json"},
                                                          {"gemma2", "gemma_keras_hub.json"},
                                                          {"mistral", "mistral_keras_hub.json"}};
  for (const auto& [family, rules] : families) {
    SCOPED_TRACE(family);
    LlamaConfig config = testing::tiny_generate_config();
    config.family = family;
    if (family == "qwen3") config.head_dim = 6;  // not hidden / heads
    if (family == "gemma2") {
      config.query_pre_attn_scalar = 8;
      config.sliding_window = 3;
      config.attn_logit_softcapping = 2.0;
      config.final_logit_softcapping = 5.0;
    }
    if (family == "mistral") config.sliding_window = 3;
    const std::string dir = (dir_ / family).string();
    clear_session();
    write_random_hf_llama(dir, config, {.kernel_scale = 2});
    clear_session();
    LlamaModel reference(config, LayoutMap(DeviceMesh({8, 1}, {"batch", "model"})));
    load_hf_llama(HfLlamaCheckpoint::open(dir), reference.variables_by_path());
    auto optimizer = make_optimizer("adamw", {.learning_rate = 1e-2});
    const LlamaTrainResult want = train_llama(reference, TokenDataset::open(data()), *optimizer,
                                              {.batch_size = 8, .steps = 3});
    clear_session();
    const auto got = run_json({.model_dir = dir,
                               .data_path = data(),
                               .rules_path = kRulesDir + rules,
                               .mesh = "batch=2,model=4",
                               .batch_size = 8,
                               .steps = 3,
                               .learning_rate = 1e-2});
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i].second, want.losses[i], 1e-4 * want.losses[i]) << "step " << i;
    }
    EXPECT_NE(want.losses.front(), want.losses.back());  // it trains
  }
}

TEST_F(TrainCommandTest, SavedRunsResumeOnAnotherMeshAndContinueTheTrajectory) {
  const auto whole = run_json({.model_dir = model(),
                               .data_path = data(),
                               .mesh = "batch=2,model=4",
                               .batch_size = 4,
                               .steps = 6,
                               .optimizer = "adam"});
  clear_session();
  const std::string saved = (dir_ / "saved").string();
  const auto first = run_json({.model_dir = model(),
                               .data_path = data(),
                               .mesh = "batch=2,model=4",
                               .batch_size = 4,
                               .steps = 3,
                               .optimizer = "adam",
                               .save_dir = saved});
  EXPECT_TRUE(fs::exists(fs::path(saved) / "config.json"));
  EXPECT_TRUE(fs::exists(fs::path(saved) / kOptimizerStateFile));
  clear_session();
  // Resumed with Megatron rules on a 4x2 mesh: steps 3..5 on rows 12..23.
  const auto rest = run_json({.model_dir = saved,
                              .data_path = data(),
                              .rules_path = kRulesDir + "llama_megatron.json",
                              .mesh = "batch=4,model=2",
                              .batch_size = 4,
                              .steps = 3,
                              .optimizer = "adam"});
  ASSERT_EQ(whole.size(), 6u);
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(first[i], whole[i]);  // the same layouts: bit for bit
    EXPECT_EQ(rest[i].first, whole[i + 3].first);
    EXPECT_NEAR(rest[i].second, whole[i + 3].second, 1e-5 * whole[i + 3].second)
        << "step " << i + 3;
  }
  // Another optimizer than the saved state's is refused, naming both.
  clear_session();
  try {
    run_json(
        {.model_dir = saved, .data_path = data(), .batch_size = 4, .steps = 1, .optimizer = "sgd"});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds the state of another optimizer than --optimizer 'SGD'"));
  }
}

TEST_F(TrainCommandTest, PeriodicCheckpointsKeepTheLastKAndResumeTheTrajectory) {
  const auto whole = run_json({.model_dir = model(),
                               .data_path = data(),
                               .mesh = "batch=2,model=4",
                               .batch_size = 4,
                               .steps = 6,
                               .optimizer = "adam"});
  clear_session();
  const std::string root = (dir_ / "checkpoints").string();
  (void)run_json({.model_dir = model(),
                  .data_path = data(),
                  .mesh = "batch=2,model=4",
                  .batch_size = 4,
                  .steps = 5,
                  .optimizer = "adam",
                  .checkpoint_every = 2,
                  .checkpoint_dir = root,
                  .keep_last = 1});
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(root)) kept.push_back(e.path().filename().string());
  EXPECT_EQ(kept, std::vector<std::string>{"step-00000004"});
  const std::string latest = TrainingCheckpoint::latest(root);
  EXPECT_EQ(read_save_marker(latest).at("next_batch"), 4);
  clear_session();
  const auto rest = run_json({.model_dir = latest,
                              .data_path = data(),
                              .mesh = "batch=2,model=4",
                              .batch_size = 4,
                              .steps = 2,
                              .optimizer = "adam"});
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0], whole[4]);  // the same mesh and rules: bit for bit
  EXPECT_EQ(rest[1], whole[5]);
  clear_session();
  const auto refused = [&](TrainCommandOptions o) -> std::string {
    o.model_dir = model();
    o.data_path = data();
    o.batch_size = 4;
    o.steps = 1;
    std::ostringstream out;
    try {
      run_train(o, out);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(refused({.checkpoint_every = 2}), HasSubstr("go together"));
  EXPECT_THAT(refused({.checkpoint_dir = root}), HasSubstr("go together"));
  EXPECT_THAT(refused({.checkpoint_every = 2, .checkpoint_dir = root, .keep_last = -1}),
              HasSubstr("must be at least 1"));
  EXPECT_THAT(refused({.checkpoint_every = 1, .checkpoint_dir = data()}),
              HasSubstr("is not a directory"));
}

TEST_F(TrainCommandTest, Zero1TrainsTheSameAndItsStateResumesEitherWay) {
  const TrainCommandOptions base{.model_dir = model(),
                                 .data_path = data(),
                                 .rules_path = kRulesDir + "llama_megatron.json",
                                 .mesh = "batch=2,model=4",
                                 .batch_size = 4,
                                 .steps = 6,
                                 .optimizer = "adamw"};
  const auto whole = run_json(base);
  ASSERT_EQ(whole.size(), 6u);
  clear_session();
  TrainCommandOptions zero = base;
  zero.zero1 = true;
  EXPECT_EQ(run_json(zero), whole);  // the same per-element arithmetic: bit for bit
  for (const bool save_with_zero1 : {true, false}) {
    SCOPED_TRACE(save_with_zero1 ? "saved with --zero1, resumed without"
                                 : "saved without, resumed with --zero1");
    const std::string saved = (dir_ / (save_with_zero1 ? "saved_zero1" : "saved_plain")).string();
    clear_session();
    TrainCommandOptions first = base;
    first.steps = 3;
    first.zero1 = save_with_zero1;
    first.save_dir = saved;
    const auto head = run_json(first);
    clear_session();
    TrainCommandOptions rest = base;
    rest.model_dir = saved;
    rest.steps = 3;
    rest.zero1 = !save_with_zero1;
    const auto tail = run_json(rest);
    ASSERT_EQ(head.size(), 3u);
    ASSERT_EQ(tail.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(head[i], whole[i]);
      EXPECT_EQ(tail[i], whole[i + 3]);  // iteration, rows and slots all restored
    }
  }
  clear_session();
  std::ostringstream out;
  zero.steps = 1;
  EXPECT_EQ(run_train(zero, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("; ZeRO-1: slots sharded over 'batch')"));
}

TEST_F(TrainCommandTest, TextReportGivesLossesRateAndMemory) {
  std::ostringstream out;
  EXPECT_EQ(
      run_train({.model_dir = model(), .data_path = data(), .batch_size = 8, .steps = 2}, out), 0);
  EXPECT_THAT(out.str(), HasSubstr("mesh: mesh[batch=8,model=1]"));
  EXPECT_THAT(out.str(), HasSubstr("optimizer: adamw (learning rate 0.001"));
  EXPECT_THAT(out.str(), ::testing::ContainsRegex("step +1  loss [0-9.]+"));
  EXPECT_THAT(out.str(), ::testing::ContainsRegex("trained 128 tokens in [0-9.]+ s"));
  EXPECT_THAT(out.str(), HasSubstr("memory per device"));
}

TEST_F(TrainCommandTest, RefusesBadOptionsAndDataNamingThem) {
  const auto refused = [&](TrainCommandOptions o) -> std::string {
    std::ostringstream out;
    try {
      run_train(o, out);
    } catch (const Error& e) {
      EXPECT_EQ(out.str(), "");
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return "";
  };
  const TrainCommandOptions ok{
      .model_dir = model(), .data_path = data(), .batch_size = 4, .steps = 1};
  TrainCommandOptions o = ok;
  o.optimizer = "nadam";
  EXPECT_THAT(refused(o), HasSubstr("nadam"));
  o = ok;
  o.batch_size = 0;
  EXPECT_THAT(refused(o), HasSubstr("--batch-size must be at least 1, got 0"));
  o = ok;
  o.steps = 9;
  EXPECT_THAT(refused(o), HasSubstr("has 32 rows, but steps 0 to 8 of batch 4 need 36"));
  o = ok;
  o.data_path = (dir_ / "missing.safetensors").string();
  EXPECT_THAT(refused(o), HasSubstr("missing.safetensors"));
  o = ok;
  o.data_path = (dir_ / "llama" / "model.safetensors").string();
  EXPECT_THAT(refused(o), HasSubstr("has no tensor \"tokens\""));
  o = ok;
  o.save_dir = model();
  EXPECT_THAT(refused(o), HasSubstr("is the --model directory"));
  o = ok;
  o.save_dir = dir_.string();  // not empty
  EXPECT_THAT(refused(o), HasSubstr("the directory is not empty"));
  EXPECT_TRUE(fs::exists(dir_ / "tokens.safetensors"));  // nothing the user had is touched
}

// A stream that runs `hook` once, at the first thing written to it: here, after the first
// training step (the --json line), which is how a test changes the disk mid-run.
class HookedBuffer : public std::stringbuf {
 public:
  explicit HookedBuffer(std::function<void()> hook) : hook_(std::move(hook)) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (hook_) std::exchange(hook_, nullptr)();
    return std::stringbuf::xsputn(s, n);
  }

 private:
  std::function<void()> hook_;
};

// Issue 24: a resumed run with --steps near 2^63 used to wrap first_step + steps, run no step
// and exit 0 with a negative tokens/s.
TEST_F(TrainCommandTest, StepCountsThatOverflowAreRefused) {
  const std::string saved = (dir_ / "saved").string();
  run_json(
      {.model_dir = model(), .data_path = data(), .batch_size = 4, .steps = 2, .save_dir = saved});
  clear_session();
  std::ostringstream out;
  TrainCommandOptions o{.model_dir = saved,
                        .data_path = data(),
                        .batch_size = 4,
                        .steps = std::numeric_limits<int64_t>::max()};
  try {
    run_train(o, out);
    ADD_FAILURE() << "accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(
        e.what(),
        HasSubstr("9223372036854775807 steps from step 2 of batch 4 need more than 2^63 - 1 rows"));
  }
  EXPECT_EQ(out.str(), "");
  clear_session();
  o.model_dir = model();
  o.steps = std::numeric_limits<int64_t>::max() / 2;  // no overflow of the sum, of the rows
  try {
    run_train(o, out);
    ADD_FAILURE() << "accepted";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("need more than 2^63 - 1 rows"));
  }
}

// An interrupted save is recognisably incomplete, and is not resumed from.
TEST_F(TrainCommandTest, IncompleteSavesAreNotResumed) {
  const std::string saved = (dir_ / "saved").string();
  run_json(
      {.model_dir = model(), .data_path = data(), .batch_size = 4, .steps = 2, .save_dir = saved});
  EXPECT_TRUE(fs::exists(fs::path(saved) / kSaveCompleteFile));
  EXPECT_FALSE(fs::exists(fs::path(saved) / kSaveLockFile));
  const nlohmann::json marker = read_save_marker(saved);
  EXPECT_EQ(marker.at("iterations"), 2);
  EXPECT_EQ(marker.at("optimizer"), "adamw");
  const auto refused = [&](const std::string& dir) -> std::string {
    clear_session();
    std::ostringstream out;
    try {
      run_train({.model_dir = dir, .data_path = data(), .batch_size = 4, .steps = 1}, out);
    } catch (const FailedPreconditionError& e) {
      return e.what();
    }
    return "<accepted>";
  };
  // Killed between the optimizer state and the marker:
  fs::remove(fs::path(saved) / kSaveCompleteFile);
  EXPECT_THAT(refused(saved),
              HasSubstr("holds 'optimizer.safetensors' but no meshlayout_save.json"));
  // Killed while saving (or still running): the lock file is still there.
  std::ofstream(fs::path(saved) / kSaveLockFile) << "pid 1 on host\n";
  EXPECT_THAT(refused(saved),
              HasSubstr("is an incomplete save: it still holds .meshlayout-save.lock"));
}

// A bad --save is found before the first step; a second run into the same directory is refused.
TEST_F(TrainCommandTest, SaveTargetIsClaimedBeforeTraining) {
  std::ofstream(dir_ / "a_file") << "x";
  const auto refused = [&](const std::string& save) -> std::string {
    clear_session();
    std::ostringstream out;
    try {
      run_train({.model_dir = model(),
                 .data_path = data(),
                 .batch_size = 4,
                 .steps = 1,
                 .save_dir = save,
                 .json = true},
                out);
    } catch (const Error& e) {
      EXPECT_EQ(out.str(), "") << "a step ran before the refusal";
      return e.what();
    }
    return "<accepted>";
  };
  EXPECT_THAT(refused((dir_ / "a_file" / "out").string()),
              HasSubstr("cannot create the directory"));
  fs::create_symlink(dir_ / "nowhere", dir_ / "dangling");
  EXPECT_THAT(refused((dir_ / "dangling").string()),
              HasSubstr("it exists and is a dangling symbolic link"));
  const std::string busy = (dir_ / "busy").string();
  SaveDirectory other_run = SaveDirectory::claim(busy, "--save");
  EXPECT_THAT(refused(busy), HasSubstr("another run is saving into this directory"));
  // A run refused for another reason leaves no directory behind.
  const std::string fresh = (dir_ / "fresh").string();
  clear_session();
  std::ostringstream out;
  EXPECT_THROW(run_train({.model_dir = model(),
                          .data_path = data(),
                          .batch_size = 4,
                          .steps = 99,
                          .save_dir = fresh},
                         out),
               ValueError);
  EXPECT_FALSE(fs::exists(fresh));
}

// A save that fails after training (here: model.safetensors made a directory during the run)
// does not lose the run: it goes to a temporary directory, and the error says where.
TEST_F(TrainCommandTest, FinishedRunIsSavedElsewhereWhenItsTargetFails) {
  const fs::path saved = dir_ / "saved";
  HookedBuffer buffer([&] { fs::create_directories(saved / "model.safetensors"); });
  std::ostream out(&buffer);
  std::string message;
  try {
    run_train({.model_dir = model(),
               .data_path = data(),
               .batch_size = 4,
               .steps = 2,
               .save_dir = saved.string(),
               .json = true},
              out);
  } catch (const FailedPreconditionError& e) {
    message = e.what();
  }
  ASSERT_THAT(message, HasSubstr("failed after training"));
  const std::string marker = "were saved to '";
  ASSERT_NE(message.find(marker), std::string::npos) << message;
  const size_t at = message.find(marker) + marker.size();
  const std::string fallback = message.substr(at, message.find('\'', at) - at);
  EXPECT_TRUE(fs::exists(fs::path(fallback) / kOptimizerStateFile));
  EXPECT_EQ(read_save_marker(fallback).at("iterations"), 2);
  // The fallback resumes like any complete save.
  clear_session();
  const auto rest =
      run_json({.model_dir = fallback, .data_path = data(), .batch_size = 4, .steps = 1});
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].first, 2);
  fs::remove_all(fallback);
}

}  // namespace
}  // namespace meshlayout::cli
