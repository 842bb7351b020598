// fit on arrays with Keras' initial_epoch and steps_per_epoch (trainer.h): a fit resumed at
// epoch e continues the uninterrupted run bit for bit (the same shuffles, the same batches);
// steps_per_epoch runs the batches on through one pass over the rows, an epoch ending early
// when the pass runs out and the next epoch starting a new (reshuffled) pass, so the batch
// losses equal a plain fit's; on_train_batch_end gets the step's predictions and targets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/train/trainer.h"
#include "meshlayout/train/trainer_test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

// Every batch's (epoch, batch, rows) and loss; the predictions and targets of each batch.
class BatchRecorder : public Callback {
 public:
  void on_train_batch_end(Trainer&, const BatchLogs& l) override {
    events.push_back(
        fmt::format("e{} b{} rows{}", l.epoch, l.batch, l.y_true ? l.y_true->shape()[0] : -1));
    losses.push_back(l.loss);
    if (l.y_pred) predictions.push_back(l.y_pred->gather());
    if (l.y_true) targets.push_back(l.y_true->gather());
  }
  std::vector<std::string> events;
  std::vector<double> losses;
  std::vector<HostTensor> predictions, targets;
};

class TrainerEpochsTest : public NnTest {
 protected:
  static Trainer sgd(double learning_rate = 0.05) {
    clear_session();
    return compile(
        make_mlp(),
        {.optimizer = "sgd", .optimizer_options = {.learning_rate = learning_rate}, .loss = "mse"});
  }
  static std::vector<std::vector<double>> weights(const Trainer& t) {
    std::vector<std::vector<double>> out;
    for (const VariablePtr& v : t.model().variables())
      out.push_back(to_doubles(v->value().gather()));
    return out;
  }
};

TEST_F(TrainerEpochsTest, InitialEpochContinuesTheUninterruptedRun) {
  const auto [x, y] = regression_data();  // 20 rows: batches of 8, 8, 4
  for (const int64_t steps : {int64_t{0}, int64_t{2}}) {
    SCOPED_TRACE(fmt::format("steps_per_epoch {}", steps));
    Trainer whole = sgd();
    const FitOptions o{.batch_size = 8,
                       .epochs = 4,
                       .shuffle = true,
                       .shuffle_seed = 3,
                       .verbose = 0,
                       .steps_per_epoch = steps};
    const History all = whole.fit(x, y, o);
    Trainer split = sgd();
    FitOptions first = o;
    first.epochs = 1;
    const History a = split.fit(x, y, first);
    FitOptions rest = o;
    rest.initial_epoch = 1;
    const History b = split.fit(x, y, rest);
    ASSERT_EQ(a.loss.size() + b.loss.size(), all.loss.size());
    EXPECT_EQ(a.loss[0], all.loss[0]);
    EXPECT_EQ(b.loss, std::vector<double>(all.loss.begin() + 1, all.loss.end()));
    EXPECT_EQ(weights(split), weights(whole));
  }
}

TEST_F(TrainerEpochsTest, StepsPerEpochRunsOnThroughThePasses) {
  const auto [x, y] = regression_data();
  // Two plain epochs (two passes of batches 8, 8, 4, each shuffled) …
  Trainer plain = sgd();
  auto p = std::make_shared<BatchRecorder>();
  (void)plain.fit(x, y,
                  {.batch_size = 8,
                   .epochs = 2,
                   .shuffle = true,
                   .shuffle_seed = 5,
                   .verbose = 0,
                   .callbacks = {p}});
  // … are four epochs of at most two steps: the pass runs out after one step of epoch 1.
  Trainer stepped = sgd();
  auto s = std::make_shared<BatchRecorder>();
  const History h = stepped.fit(x, y,
                                {.batch_size = 8,
                                 .epochs = 4,
                                 .shuffle = true,
                                 .shuffle_seed = 5,
                                 .verbose = 0,
                                 .steps_per_epoch = 2,
                                 .callbacks = {s}});
  EXPECT_EQ(s->events, (std::vector<std::string>{"e0 b0 rows8", "e0 b1 rows8", "e1 b0 rows4",
                                                 "e2 b0 rows8", "e2 b1 rows8", "e3 b0 rows4"}));
  EXPECT_EQ(s->losses, p->losses);
  EXPECT_EQ(h.loss[1], s->losses[2]);
  EXPECT_EQ(weights(stepped), weights(plain));
  EXPECT_THAT(
      [&] { (void)stepped.fit(x, y, {.batch_size = 8, .verbose = 0, .steps_per_epoch = -1}); },
      ::testing::Throws<ValueError>());
}

TEST_F(TrainerEpochsTest, BatchEndSeesTheStepsPredictionsAndTargets) {
  const auto [x, y] = regression_data();
  Trainer t = sgd(/*learning_rate=*/0.0);  // the weights stay: predict gives the same outputs
  auto rec = std::make_shared<BatchRecorder>();
  (void)t.fit(x, y, {.batch_size = 8, .verbose = 0, .callbacks = {rec}});
  ASSERT_EQ(rec->predictions.size(), 3u);
  const HostTensor all = t.predict(x, {.batch_size = 8});
  std::vector<double> got, want = to_doubles(all), labels, want_labels = to_doubles(y);
  for (const HostTensor& b : rec->predictions) {
    EXPECT_EQ(b.shape()[1], kOut);
    for (double v : to_doubles(b)) got.push_back(v);
  }
  for (const HostTensor& b : rec->targets) {
    for (double v : to_doubles(b)) labels.push_back(v);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(labels, want_labels);
}

TEST_F(TrainerEpochsTest, BadEpochOptionsAreRefused) {
  const auto [x, y] = regression_data();
  Trainer t = sgd();
  try {
    (void)t.fit(x, y, {.verbose = 0, .initial_epoch = -1});
    ADD_FAILURE() << "initial_epoch -1 taken";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("initial_epoch (-1) must be >= 0"));
  }
  // initial_epoch >= epochs: nothing runs (Keras' loop is empty).
  EXPECT_TRUE(t.fit(x, y, {.epochs = 2, .verbose = 0, .initial_epoch = 2}).loss.empty());
  EXPECT_EQ(t.optimizer().iterations(), 0);
}

}  // namespace
}  // namespace meshlayout
