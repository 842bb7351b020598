// fit on a BatchDataset (trainer.h): the same history and weights, bit for bit, as fit on the
// same rows as arrays (one device and a 2 x 4 ModelParallel mesh, a partial last batch);
// steps_per_epoch and first_batch read consecutive batches, so a run split in two fits equals
// one run; callbacks see every step and epoch in order; the refusals of bad options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/train/dataset_test_util.h"
#include "meshlayout/train/optimizer_test_util.h"
#include "meshlayout/train/trainer.h"
#include "meshlayout/train/trainer_test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class TrainerDatasetTest : public NnTest {
 protected:
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
  static std::vector<std::vector<double>> weights(const Model& model) {
    std::vector<std::vector<double>> out;
    for (const VariablePtr& v : model.variables()) out.push_back(to_doubles(v->value().gather()));
    return out;
  }
  static Trainer adam(std::shared_ptr<Sequential> model) {
    return compile(
        std::move(model),
        {.optimizer = "adam", .optimizer_options = {.learning_rate = 0.01}, .loss = "mse"});
  }
};

// Records every hook as text.
class Recorder : public Callback {
 public:
  void on_train_begin(Trainer&) override { events.push_back("begin"); }
  void on_train_batch_end(Trainer& t, const BatchLogs& l) override {
    events.push_back(fmt::format("batch e{} b{} s{} it{}", l.epoch, l.batch, l.step,
                                 t.optimizer().iterations()));
    losses.push_back(l.loss);
  }
  void on_epoch_end(Trainer&, int64_t epoch, double) override {
    events.push_back(fmt::format("epoch {}", epoch));
  }
  void on_train_end(Trainer&) override { events.push_back("end"); }
  std::vector<std::string> events;
  std::vector<double> losses;
};

TEST_F(TrainerDatasetTest, FitOnADatasetEqualsFitOnTheSameArrays) {
  const auto [x, y] = regression_data();  // 20 rows: batches of 8, 8 and a partial 4
  for (const bool model_parallel : {false, true}) {
    SCOPED_TRACE(model_parallel ? "2 x 4 ModelParallel" : "one device");
    auto on_arrays = build(model_parallel);
    Trainer a = adam(on_arrays);
    const History ha = a.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0});
    auto on_dataset = build(model_parallel);
    Trainer d = adam(on_dataset);
    const HostRowsDataset data(x, y);
    const History hd = d.fit(data, {.batch_size = 8, .epochs = 3, .verbose = 0});
    EXPECT_EQ(hd.loss, ha.loss);
    EXPECT_EQ(weights(*on_dataset), weights(*on_arrays));
    EXPECT_EQ(d.optimizer().iterations(), 9);
    EXPECT_EQ(d.next_batch(), 3);  // each epoch reads the data from row 0
  }
}

TEST_F(TrainerDatasetTest, StepsPerEpochAndFirstBatchContinueWhereTheLastFitStopped) {
  const auto [x, y] = regression_data(40);
  const HostRowsDataset data(x, y);
  auto whole = build(true);
  Trainer w = adam(whole);
  auto all = std::make_shared<Recorder>();
  w.fit(data,
        {.batch_size = 4, .epochs = 2, .verbose = 0, .steps_per_epoch = 4, .callbacks = {all}});
  EXPECT_EQ(w.next_batch(), 8);
  auto split = build(true);
  Trainer s = adam(split);
  auto first = std::make_shared<Recorder>(), second = std::make_shared<Recorder>();
  s.fit(data, {.batch_size = 4, .verbose = 0, .steps_per_epoch = 3, .callbacks = {first}});
  EXPECT_EQ(s.next_batch(), 3);
  s.fit(data, {.batch_size = 4,
               .verbose = 0,
               .steps_per_epoch = 5,
               .first_batch = 3,
               .callbacks = {second}});
  std::vector<double> losses = first->losses;
  losses.insert(losses.end(), second->losses.begin(), second->losses.end());
  EXPECT_EQ(losses, all->losses);
  EXPECT_EQ(weights(*split), weights(*whole));
  EXPECT_EQ(all->events,
            (std::vector<std::string>{
                "begin", "batch e0 b0 s0 it1", "batch e0 b1 s1 it2", "batch e0 b2 s2 it3",
                "batch e0 b3 s3 it4", "epoch 0", "batch e1 b0 s4 it5", "batch e1 b1 s5 it6",
                "batch e1 b2 s6 it7", "batch e1 b3 s7 it8", "epoch 1", "end"}));
  EXPECT_EQ(second->events.front(), "begin");
  EXPECT_EQ(second->events[1], "batch e0 b0 s3 it4");
}

TEST_F(TrainerDatasetTest, ArrayFitCallsTheCallbacksToo) {
  const auto [x, y] = regression_data();
  Trainer t = adam(build(false));
  auto rec = std::make_shared<Recorder>();
  const History h = t.fit(x, y, {.batch_size = 10, .epochs = 2, .verbose = 0, .callbacks = {rec}});
  EXPECT_EQ(rec->events, (std::vector<std::string>{
                             "begin", "batch e0 b0 s0 it1", "batch e0 b1 s1 it2", "epoch 0",
                             "batch e1 b0 s2 it3", "batch e1 b1 s3 it4", "epoch 1", "end"}));
  EXPECT_DOUBLE_EQ(h.loss[0], (rec->losses[0] + rec->losses[1]) / 2);
}

TEST_F(TrainerDatasetTest, BadOptionsAreRefusedBeforeAnyStep) {
  const auto [x, y] = regression_data();  // 20 rows
  const HostRowsDataset data(x, y);
  auto model = build(true);
  Trainer t = adam(model);
  const auto error = [&](const FitOptions& o) -> std::string {
    try {
      t.fit(data, o);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THAT(error({.batch_size = 0}), HasSubstr("batch_size must be >= 1, got 0"));
  EXPECT_THAT(error({.batch_size = 4, .epochs = -1}), HasSubstr("epochs must be >= 0, got -1"));
  EXPECT_THAT(error({.batch_size = 4, .steps_per_epoch = -2}),
              HasSubstr("steps_per_epoch must be >= 0, got -2"));
  EXPECT_THAT(error({.batch_size = 4, .first_batch = 2}), HasSubstr("needs steps_per_epoch"));
  EXPECT_THAT(error({.batch_size = 4, .shuffle = true}),
              HasSubstr("the test rows is read in order"));
  EXPECT_THAT(error({.batch_size = 4, .epochs = 2, .steps_per_epoch = 3}),
              HasSubstr("the test rows has 20 rows, but 2 epoch(s) of 3 batches of 4 from batch 0 "
                        "need 24"));
  EXPECT_THAT(error({.batch_size = 4,
                     .steps_per_epoch = 2,
                     .first_batch = std::numeric_limits<int64_t>::max() - 1}),
              HasSubstr("need more than 2^63 - 1"));
  // 20 rows in batches of 6: the partial last batch of 2 rows is fed like the others.
  EXPECT_EQ(error({.batch_size = 6, .verbose = 0}), "no error");
  EXPECT_EQ(t.optimizer().iterations(), 4);  // only that fit ran steps
  EXPECT_EQ(error({.batch_size = 4, .verbose = 0, .steps_per_epoch = 1}), "no error");
  EXPECT_THAT(error({.batch_size = 4, .verbose = 0, .initial_epoch = 1}),
              HasSubstr("initial_epoch (1) applies to fit on arrays"));
  try {
    t.fit(x, y, {.batch_size = 4, .verbose = 0, .steps_per_epoch = 1, .first_batch = 1});
    ADD_FAILURE() << "array fit took first_batch";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("first_batch (1) applies to fit on a BatchDataset"));
  }
}

}  // namespace
}  // namespace meshlayout
