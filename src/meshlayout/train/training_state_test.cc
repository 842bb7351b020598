// training_state.h: a run saved after 3 of 6 steps and resumed in a new model and optimizer
// continues bit for bit the same trajectory as the run that never stopped (same mesh), and to
// float32 rounding on another mesh; TrainingCheckpoint saves every N steps and keeps the last K;
// incomplete directories and another optimizer's state are refused; the markers' fields.
#include "meshlayout/train/training_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/model_checkpoint.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/train/dataset_test_util.h"
#include "meshlayout/train/optimizer_test_util.h"
#include "meshlayout/train/trainer_test_util.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TrainingStateTest : public NnTest {
 protected:
  void SetUp() override {
    NnTest::SetUp();
    dir_ = fs::temp_directory_path() /
           ("meshlayout_training_state_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    NnTest::TearDown();
  }
  std::shared_ptr<Sequential> build(bool model_parallel) {
    clear_session();
    if (!model_parallel) return make_mlp();
    LayoutMap map(mesh_);
    map["d1/kernel"] = {None, "model"};
    map["d1/bias"] = {"model"};
    map["d2/kernel"] = {"model", None};
    DistributionScope scope = std::make_shared<ModelParallel>(map, "data")->scope();
    return make_mlp();
  }
  static Trainer adam(std::shared_ptr<Sequential> model) {
    return compile(std::move(model), {.optimizer = "adam",
                                      .optimizer_options = {.name = "adam", .learning_rate = 0.01},
                                      .loss = "mse"});
  }
  static ModelFiles files(const std::shared_ptr<Sequential>& model) {
    return {.names = {"model.safetensors"}, .write = [model](const std::string& dir) {
              save_model(*model, (fs::path(dir) / "model.safetensors").string());
            }};
  }
  static std::vector<std::vector<double>> weights(const Model& model) {
    std::vector<std::vector<double>> out;
    for (const VariablePtr& v : model.variables()) out.push_back(to_doubles(v->value().gather()));
    return out;
  }
  // Losses of `steps` steps from batch `first` (batch 4).
  static std::vector<double> run(Trainer& t, const BatchDataset& data, int64_t first, int64_t steps,
                                 std::vector<std::shared_ptr<Callback>> more = {}) {
    struct Losses : Callback {
      std::vector<double> values;
      void on_train_batch_end(Trainer&, const BatchLogs& l) override { values.push_back(l.loss); }
    };
    auto losses = std::make_shared<Losses>();
    more.push_back(losses);
    t.fit(data, {.batch_size = 4,
                 .verbose = 0,
                 .steps_per_epoch = steps,
                 .first_batch = first,
                 .callbacks = more});
    return losses->values;
  }
  fs::path dir_;
};

TEST_F(TrainingStateTest, AResumedRunContinuesTheTrajectoryOfTheRunThatNeverStopped) {
  const auto [x, y] = regression_data(24);
  const HostRowsDataset data(x, y);
  auto whole = build(true);
  Trainer w = adam(whole);
  const std::vector<double> all = run(w, data, 0, 6);

  auto first = build(true);
  Trainer f = adam(first);
  (void)run(f, data, 0, 3);
  const std::string state = (dir_ / "state").string();
  save_training_state(state, files(first), f.optimizer(),
                      {.iterations = f.optimizer().iterations(), .next_batch = f.next_batch()});
  const nlohmann::json marker = read_save_marker(state);
  EXPECT_EQ(marker.at("format"), kTrainingStateFormat);
  EXPECT_EQ(marker.at("iterations"), 3);
  EXPECT_EQ(marker.at("next_batch"), 3);
  EXPECT_EQ(marker.at("optimizer"), "adam");
  EXPECT_EQ(marker.at("files"), (nlohmann::json{"model.safetensors", kOptimizerStateFile}));

  for (const bool same_mesh : {true, false}) {
    SCOPED_TRACE(same_mesh ? "the same 2 x 4 mesh" : "one device");
    auto resumed = build(same_mesh);
    load_model(*resumed, Checkpoint::open((fs::path(state) / "model.safetensors").string()));
    Trainer r = adam(resumed);
    const std::optional<TrainingPosition> p =
        resume_training_state(state, r.optimizer(), resumed->variables());
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->iterations, 3);
    EXPECT_EQ(p->next_batch, 3);
    const std::vector<double> rest = run(r, data, p->next_batch, 3);
    const std::vector<double> want(all.begin() + 3, all.end());
    if (same_mesh) {
      EXPECT_EQ(rest, want);
      EXPECT_EQ(weights(*resumed), weights(*whole));
    } else {
      ASSERT_EQ(rest.size(), want.size());
      for (size_t i = 0; i < rest.size(); ++i)
        EXPECT_NEAR(rest[i], want[i], 1e-5 * std::abs(want[i]));
    }
  }
}

TEST_F(TrainingStateTest, TheCheckpointCallbackSavesEveryNStepsAndKeepsTheLastK) {
  const auto [x, y] = regression_data(28);
  const HostRowsDataset data(x, y);
  auto model = build(true);
  Trainer t = adam(model);
  const std::string root = (dir_ / "run").string();
  auto every = std::make_shared<TrainingCheckpoint>(
      root, files(model), TrainingCheckpointOptions{.every_steps = 2, .keep_last = 2});
  (void)run(t, data, 0, 7, {every});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-00000004", "step-00000006"}));
  EXPECT_EQ(every->saved(),
            (std::vector<std::string>{(fs::path(root) / "step-00000004").string(),
                                      (fs::path(root) / "step-00000006").string()}));
  EXPECT_EQ(TrainingCheckpoint::latest(root), (fs::path(root) / "step-00000006").string());
  EXPECT_EQ(read_save_marker(TrainingCheckpoint::latest(root)).at("next_batch"), 6);
  // An interrupted save (its lock file left) is not the latest, and is not resumed from.
  fs::create_directories(fs::path(root) / "step-00000008");
  std::ofstream(fs::path(root) / "step-00000008" / kSaveLockFile).put('x');
  std::ofstream(fs::path(root) / "step-00000008" / kOptimizerStateFile).put('x');
  EXPECT_EQ(TrainingCheckpoint::latest(root), (fs::path(root) / "step-00000006").string());
  Trainer other = adam(build(true));
  EXPECT_THROW((void)resume_training_state((fs::path(root) / "step-00000008").string(),
                                           other.optimizer(), model->variables()),
               FailedPreconditionError);
  EXPECT_EQ(TrainingCheckpoint::latest((dir_ / "nothing").string()), "");
}

TEST_F(TrainingStateTest, BadStatesAndOptionsAreRefused) {
  const auto [x, y] = regression_data(8);
  const HostRowsDataset data(x, y);
  auto model = build(false);
  Trainer t = adam(model);
  (void)run(t, data, 0, 2);
  const std::string state = (dir_ / "state").string();
  save_training_state(state, files(model), t.optimizer(), {.iterations = 2, .next_batch = 2});
  // A second save into the same (now complete, not empty) directory is refused.
  EXPECT_THROW(save_training_state(state, files(model), t.optimizer(), {}), ValueError);
  // Another optimizer's state: its variables are named for adam, not sgd.
  auto sgd = make_optimizer("sgd", {.name = "sgd", .momentum = 0.9});
  try {
    (void)resume_training_state(state, *sgd, model->variables());
    ADD_FAILURE() << "sgd took adam's state";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("holds the state of another optimizer"));
  }
  // A directory without optimizer state is a plain model directory: nothing to resume.
  EXPECT_EQ(resume_training_state(dir_.string(), *sgd, model->variables()), std::nullopt);
  EXPECT_THROW(TrainingCheckpoint((dir_ / "r").string(), files(model), {.every_steps = 0}),
               ValueError);
  EXPECT_THROW(
      TrainingCheckpoint((dir_ / "r").string(), files(model), {.every_steps = 1, .keep_last = -1}),
      ValueError);
  std::ofstream(dir_ / "a_file").put('x');
  try {
    TrainingCheckpoint((dir_ / "a_file").string(), files(model), {.every_steps = 1});
    ADD_FAILURE() << "a file as the root";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a directory"));
  }
}

}  // namespace
}  // namespace meshlayout
