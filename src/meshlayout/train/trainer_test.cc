// compile / fit / evaluate / predict of a Sequential Dense(relu) → Dense regression against a
// float64 host reference (trainer_test_util.h): one device, a 2 x 4 mesh with ModelParallel
// column-/row-parallel rules, DataParallel on 8 devices and no distribution give the
// reference's history (SGD and Adam, a partial last batch); evaluate and predict equal the
// forward on the whole data; the errors; the progress output. compile(zero1) gives the same
// history bit for bit with slots sharded over the batch axis. With kernel/bias regularisers, fit
// and evaluate report the loss plus the penalties and fit's gradients include theirs (against
// the float64 reference that includes them).
#include "meshlayout/train/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/normalization/batch_normalization.h"

#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/train/adam.h"
#include "meshlayout/train/progress.h"
#include "meshlayout/train/trainer_test_util.h"

namespace meshlayout {
namespace {

class TrainerTest : public NnTest {
 protected:
  // The model built under `dist` (none: no scope).
  std::shared_ptr<Sequential> build(const std::shared_ptr<const Distribution>& dist,
                                    const MlpRegularizers& reg = {}) {
    clear_session();
    if (!dist) return make_mlp(reg);
    DistributionScope scope = dist->scope();
    return make_mlp(reg);
  }
  std::shared_ptr<const Distribution> model_parallel() {
    LayoutMap map(mesh_);
    map["d1/kernel"] = {None, "model"};  // column-parallel
    map["d1/bias"] = {"model"};
    map["d2/kernel"] = {"model", None};  // row-parallel
    return std::make_shared<ModelParallel>(map, "data");
  }
};

TEST_F(TrainerTest, Zero1FitsTheSameHistoryWithSlotsShardedOverTheBatchAxis) {
  const auto [x, y] = regression_data();
  std::vector<double> plain_loss;
  std::vector<std::vector<double>> plain_weights;
  for (const bool zero1 : {false, true}) {
    SCOPED_TRACE(zero1 ? "zero1" : "plain");
    auto model = build(model_parallel());
    Trainer trainer = compile(model, {.optimizer = "adam",
                                      .optimizer_options = {.learning_rate = 0.01},
                                      .zero1 = zero1,
                                      .loss = "mse"});
    const History h = trainer.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0});
    std::vector<std::vector<double>> weights;
    for (const VariablePtr& v : model->variables())
      weights.push_back(to_doubles(v->value().gather()));
    if (!zero1) {
      EXPECT_EQ(trainer.optimizer().shard_slots_over(), std::nullopt);
      plain_loss = h.loss;
      plain_weights = weights;
      continue;
    }
    EXPECT_EQ(trainer.optimizer().shard_slots_over(), "data");
    EXPECT_EQ(h.loss, plain_loss);
    EXPECT_EQ(weights, plain_weights);
    // d1/kernel {None, model} → slots {data, model}: each device holds half its kernel's bytes.
    const VariablePtr kernel = model->layers()[0]->own_weights()[0].second;
    const VariablePtr momentum = trainer.optimizer().slots_of(*kernel)[0];
    EXPECT_EQ(momentum->value().layout(), TensorLayout({"data", "model"}, mesh_));
    EXPECT_EQ(momentum->value().local_bytes() * 2, kernel->value().local_bytes());
  }
  auto model = build(model_parallel());
  EXPECT_THROW((void)compile(model, {.optimizer = "adam",
                                     .optimizer_options = {.shard_slots_over = "model"},
                                     .zero1 = true,
                                     .loss = "mse"}),
               ValueError);
  EXPECT_THROW(
      (void)compile(model,
                    {.optimizer_instance = std::make_shared<Adam>(), .zero1 = true, .loss = "mse"}),
      ValueError);
}

struct Config {
  std::string name;
  std::shared_ptr<const Distribution> dist;
};

TEST_F(TrainerTest, FitMatchesTheFloat64ReferenceOnEveryMeshAndTheLossDecreases) {
  const auto [x, y] = regression_data();
  const std::vector<Config> configs = {
      {"one device", std::make_shared<DataParallel>(DeviceMesh(std::vector<int64_t>{1},
                                                               std::vector<std::string>{"batch"},
                                                               std::vector<std::string>{"cpu:0"}))},
      {"ModelParallel 2x4", model_parallel()},
      {"DataParallel 8", std::make_shared<DataParallel>()},
      {"no distribution", nullptr},
  };
  for (const std::string kind : {"sgd", "adam"}) {
    const OptimizerOptions opts{.learning_rate = kind == "sgd" ? 0.05 : 0.01};
    std::vector<double> first;
    for (const Config& c : configs) {
      SCOPED_TRACE(kind + " " + c.name);
      auto model = build(c.dist);
      if (c.name == "ModelParallel 2x4") {
        EXPECT_EQ(model->layers()[0]->own_weights()[0].second->value().layout(),
                  TensorLayout({None, "model"}, mesh_));
      }
      RefMlp ref(*model);
      const std::vector<double> want = ref.fit(x, y, 8, 4, RefOptimizer(kind, opts));
      Trainer trainer =
          compile(model, {.optimizer = kind, .optimizer_options = opts, .loss = "mse"});
      const History h = trainer.fit(x, y, {.batch_size = 8, .epochs = 4, .verbose = 0});
      expect_history_near(h.loss, want, 1e-5);
      EXPECT_LT(h.loss.back(), h.loss.front());
      EXPECT_EQ(trainer.optimizer().iterations(), 4 * 3);  // 8 + 8 + 4 rows per epoch
      if (first.empty()) {
        first = h.loss;
      } else {
        expect_history_near(h.loss, first, 1e-5);
      }
      std::printf("%s %s: loss %.6f -> %.6f (reference %.6f -> %.6f)\n", kind.c_str(),
                  c.name.c_str(), h.loss.front(), h.loss.back(), want.front(), want.back());
    }
  }
}

// Keras' compute_loss: fit's loss is the mse plus the weights' regularisation penalties, and
// its gradient includes theirs (l1·sign(w) + 2·l2·w, added in each variable's layout): the
// history and the trained weights are the float64 reference's that includes both, on every
// mesh, and the history is not the unregularised one.
TEST_F(TrainerTest, FitWithRegularisersMatchesTheFloat64ReferenceIncludingThePenalty) {
  const auto [x, y] = regression_data();
  const std::vector<Config> configs = {
      {"one device", std::make_shared<DataParallel>(DeviceMesh(std::vector<int64_t>{1},
                                                               std::vector<std::string>{"batch"},
                                                               std::vector<std::string>{"cpu:0"}))},
      {"ModelParallel 2x4", model_parallel()},
      {"DataParallel 8", std::make_shared<DataParallel>()},
      {"no distribution", nullptr},
  };
  for (const std::string kind : {"sgd", "adam"}) {
    const OptimizerOptions opts{.learning_rate = kind == "sgd" ? 0.05 : 0.01};
    for (const Config& c : configs) {
      SCOPED_TRACE(kind + " " + c.name);
      const History plain =
          compile(build(c.dist), {.optimizer = kind, .optimizer_options = opts, .loss = "mse"})
              .fit(x, y, {.batch_size = 8, .epochs = 4, .verbose = 0});
      auto model = build(c.dist, mlp_regularizers());
      RefMlp ref(*model);
      const double initial_penalty = ref.penalty();
      const std::vector<double> want = ref.fit(x, y, 8, 4, RefOptimizer(kind, opts));
      Trainer trainer =
          compile(model, {.optimizer = kind, .optimizer_options = opts, .loss = "mse"});
      const History h = trainer.fit(x, y, {.batch_size = 8, .epochs = 4, .verbose = 0});
      expect_history_near(h.loss, want, 1e-5);
      const std::vector<VariablePtr> vars = model->variables();
      ASSERT_EQ(vars.size(), ref.vars().size());
      for (size_t i = 0; i < vars.size(); ++i) {
        EXPECT_LT(max_rel_error(to_doubles(vars[i]->value().gather()), ref.vars()[i].theta), 1e-5)
            << vars[i]->path();
      }
      // The penalty is in the history: the first epoch's loss exceeds the unregularised one by
      // about the initial penalty (the weights differ little after the epoch's first step).
      EXPECT_GT(initial_penalty, 0.1);
      EXPECT_NEAR(h.loss[0] - plain.loss[0], initial_penalty, 0.2 * initial_penalty);
      std::printf(
          "%s %s: regularised %.6f -> %.6f, unregularised %.6f -> %.6f, initial penalty %.6f\n",
          kind.c_str(), c.name.c_str(), h.loss.front(), h.loss.back(), plain.loss.front(),
          plain.loss.back(), initial_penalty);
    }
  }
}

// Keras' test_step reports compute_loss: evaluate's loss is the mse plus the penalties of the
// trainable weights (a frozen weight's regulariser adds nothing, as Keras reads
// trainable_weights); fit on frozen regularised weights leaves them as they are.
TEST_F(TrainerTest, EvaluateIncludesThePenaltyOfTheTrainableWeights) {
  const auto [x, y] = regression_data();
  for (const bool freeze : {false, true}) {
    SCOPED_TRACE(freeze ? "d2/kernel frozen" : "all trainable");
    auto model = build(model_parallel(), mlp_regularizers());
    const VariablePtr d2_kernel = model->layers()[1]->own_weights()[0].second;
    ASSERT_TRUE(d2_kernel->regularizer().has_value());
    if (freeze) d2_kernel->set_trainable(false);
    Trainer trainer = compile(
        model, {.optimizer = "sgd", .optimizer_options = {.learning_rate = 0.05}, .loss = "mse"});
    (void)trainer.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
    RefMlp ref(*model);  // the trained weights; the regularisers of the trainable ones
    const double mse = RefMlp::mse(ref.forward(to_doubles(x), kRows), to_doubles(y));
    const double loss = trainer.evaluate(x, y, {.batch_size = 8});  // 8, 8, 4
    EXPECT_NEAR(loss, mse + ref.penalty(), 1e-5 * loss);
    EXPECT_GT(ref.penalty(), 100 * 1e-5 * loss);  // the tolerance cannot hide it
    if (freeze) {
      // d2/kernel's L1 penalty (0.02 * sum |w|) is left out.
      const std::vector<double> k = to_doubles(d2_kernel->value().gather());
      double l1 = 0;
      for (const double w : k) l1 += std::abs(w);
      EXPECT_GT(0.02 * l1, 100 * 1e-5 * loss);
      EXPECT_EQ(k, to_doubles(build(model_parallel(), mlp_regularizers())
                                  ->layers()[1]
                                  ->own_weights()[0]
                                  .second->value()
                                  .gather()));
    }
  }
}

TEST_F(TrainerTest, EvaluateAndPredictEqualTheForwardOnTheWholeData) {
  const auto [x, y] = regression_data();
  for (const auto& dist :
       {model_parallel(), std::shared_ptr<const Distribution>(std::make_shared<DataParallel>())}) {
    auto model = build(dist);
    Trainer trainer = compile(model, {.optimizer = "sgd", .loss = "mean_squared_error"});
    (void)trainer.fit(x, y, {.batch_size = 6, .epochs = 1, .verbose = 0});  // 6, 6, 6, 2
    RefMlp ref(*model);                                                     // the trained weights
    const std::vector<double> want = ref.forward(to_doubles(x), kRows);
    const HostTensor pred = trainer.predict(x, {.batch_size = 7});  // 7, 7, 6
    EXPECT_EQ(pred.shape(), (Shape{kRows, kOut}));
    EXPECT_LT(max_rel_error(to_doubles(pred), want), 1e-5);
    const double loss = trainer.evaluate(x, y, {.batch_size = 8});
    EXPECT_NEAR(loss, RefMlp::mse(want, to_doubles(y)), 1e-5 * loss);
    EXPECT_EQ(trainer.optimizer().iterations(), 4);  // evaluate and predict do not train
  }
}

// fit's steps run in training mode (BatchNormalization on the batch's statistics, updating its
// moving ones), evaluate and predict in inference; the model is back in inference after fit.
TEST_F(TrainerTest, FitTrainsInTrainingModeThenReturnsToInference) {
  const auto [x, y] = regression_data();
  clear_session();
  auto bn = std::make_shared<BatchNormalization>();
  auto model = std::make_shared<Sequential>(
      std::vector<std::shared_ptr<Layer>>{std::make_shared<Dense>(kHidden), bn,
                                          std::make_shared<Dense>(kOut)},
      SequentialOptions{.name = "bn_mlp", .input_shape = Shape{kIn}});
  Trainer trainer = compile(model, {.optimizer = "sgd", .loss = "mse"});
  const HostTensor before = bn->moving_mean()->value().gather();
  (void)trainer.fit(x, y, {.batch_size = 10, .epochs = 1, .verbose = 0});
  EXPECT_FALSE(bn->training());
  const HostTensor after = bn->moving_mean()->value().gather();
  EXPECT_FALSE(after == before) << "fit did not run BatchNormalization in training mode";
  (void)trainer.evaluate(x, y, {.batch_size = 10});
  (void)trainer.predict(x, {.batch_size = 10});
  EXPECT_EQ(bn->moving_mean()->value().gather(), after);  // inference leaves the statistics
}

TEST_F(TrainerTest, ShuffleIsSeededAndTrains) {
  const auto [x, y] = regression_data();
  std::vector<std::vector<double>> runs;
  for (uint64_t seed : {7u, 7u, 8u}) {
    auto model = build(nullptr);
    Trainer trainer = compile(
        model, {.optimizer = "sgd", .optimizer_options = {.learning_rate = 0.05}, .loss = "mse"});
    runs.push_back(
        trainer
            .fit(
                x, y,
                {.batch_size = 8, .epochs = 3, .shuffle = true, .shuffle_seed = seed, .verbose = 0})
            .loss);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], runs[2]);
  EXPECT_LT(runs[0].back(), runs[0].front());
}

TEST_F(TrainerTest, BadInputsAreClearErrors) {
  const auto [x, y] = regression_data();
  auto model = build(nullptr);
  Trainer trainer = compile(model, {.optimizer = "adam", .loss = "mse"});
  HostTensor short_y(DType::kF32, {kRows - 1, kOut});
  std::string msg =
      testing::ValueErrorMessage([&] { (void)trainer.fit(x, short_y, {.verbose = 0}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "(20, 4)"));
  EXPECT_TRUE(testing::HasSubstr(msg, "(19, 2)"));
  msg = testing::ValueErrorMessage([&] {
    (void)trainer.fit(x, HostTensor(DType::kI32, {kRows, kOut}), {.verbose = 0});
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "I32"));
  msg = testing::ValueErrorMessage([&] {
    (void)trainer.fit(x, HostTensor(DType::kF32, {kRows, 3}), {.verbose = 0});
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "(20, 3)"));
  EXPECT_TRUE(testing::HasSubstr(msg, "(20, 2)"));
  msg =
      testing::ValueErrorMessage([&] { (void)trainer.fit(x, y, {.batch_size = 0, .verbose = 0}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "batch_size"));
  msg = testing::ValueErrorMessage([&] { (void)trainer.fit(x, y, {.verbose = 3}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "got 3"));
  msg = testing::ValueErrorMessage([&] {
    (void)trainer.evaluate(HostTensor(DType::kF32, {0, kIn}), y);
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "no rows"));
  EXPECT_EQ(trainer.optimizer().iterations(), 0);

  // NaN: stops at the step that sees it, before its update.
  HostTensor bad_y = y;
  bad_y.data_as<float>()[10 * kOut] = std::nanf("");
  msg = testing::ValueErrorMessage(
      [&] { (void)trainer.fit(x, bad_y, {.batch_size = 8, .epochs = 2, .verbose = 0}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "epoch 0, step 1"));
  EXPECT_EQ(trainer.optimizer().iterations(), 1);
  // Keras' default (no TerminateOnNaN) keeps going.
  auto model2 = build(nullptr);
  Trainer keep = compile(model2, {.optimizer = "sgd", .loss = "mse"});
  EXPECT_TRUE(std::isnan(
      keep.fit(x, bad_y, {.batch_size = 8, .verbose = 0, .terminate_on_nan = false}).loss[0]));

  // compile errors.
  msg = testing::ValueErrorMessage(
      [&] { (void)compile(model, {.optimizer = "nadam", .loss = "mse"}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "adamw"));
  msg = testing::ValueErrorMessage(
      [&] { (void)compile(model, {.optimizer = "sgd", .loss = "huber"}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "'huber'"));
  msg = testing::ValueErrorMessage([&] { (void)compile(model, {.loss = "mse"}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "optimizer is required"));
}

// compile(loss="categorical_crossentropy"): a softmax classifier (Dense(5, softmax), from_logits
// false: normalise, clip, −Σ t·log; and Dense(5) logits with from_logits true) on one-hot and
// soft targets fits the float64 reference's history and weights on one device, a 2 x 4 mesh
// with the classes split over 'model' (5 over 4: the loss is vocab-parallel), DataParallel 8 and
// no distribution; the loss decreases; evaluate equals the reference loss of the trained model.
TEST_F(TrainerTest, CategoricalCrossentropyFitsASoftmaxClassifierAsTheFloat64Reference) {
  const auto [x, y] = classification_data();
  LayoutMap map(mesh_);
  map["d1/kernel"] = {None, "model"};
  map["d1/bias"] = {"model"};
  map["d2/kernel"] = {None,
                      "model"};  // the class dimension split: logits / probabilities (…, 5 over 4)
  map["d2/bias"] = {"model"};
  const std::vector<Config> configs = {
      {"one device", std::make_shared<DataParallel>(DeviceMesh(std::vector<int64_t>{1},
                                                               std::vector<std::string>{"batch"},
                                                               std::vector<std::string>{"cpu:0"}))},
      {"ModelParallel 2x4, classes over model", std::make_shared<ModelParallel>(map, "data")},
      {"DataParallel 8", std::make_shared<DataParallel>()},
      {"no distribution", nullptr},
  };
  for (const bool from_logits : {false, true}) {
    for (const std::string kind : {"sgd", "adam"}) {
      const OptimizerOptions opts{.learning_rate = kind == "sgd" ? 0.2 : 0.02};
      for (const Config& c : configs) {
        SCOPED_TRACE(fmt::format("{} {} {}", from_logits ? "logits" : "softmax", kind, c.name));
        clear_session();
        std::shared_ptr<Sequential> model;
        if (c.dist) {
          DistributionScope scope = c.dist->scope();
          model = make_classifier(!from_logits);
        } else {
          model = make_classifier(!from_logits);
        }
        if (c.name.starts_with("ModelParallel")) {
          EXPECT_EQ(model->layers()[1]->own_weights()[0].second->value().layout(),
                    TensorLayout({None, "model"}, mesh_));
        }
        RefClassifier ref(*model, !from_logits);
        const std::vector<double> want = ref.fit(x, y, 8, 4, RefOptimizer(kind, opts));
        Trainer trainer = compile(model, {.optimizer = kind,
                                          .optimizer_options = opts,
                                          .loss = "categorical_crossentropy",
                                          .loss_options = {.from_logits = from_logits}});
        const History h = trainer.fit(x, y, {.batch_size = 8, .epochs = 4, .verbose = 0});
        expect_history_near(h.loss, want, 1e-5);
        EXPECT_LT(h.loss.back(), 0.8 * h.loss.front());
        const std::vector<VariablePtr> vars = model->variables();
        ASSERT_EQ(vars.size(), ref.vars().size());
        for (size_t i = 0; i < vars.size(); ++i) {
          EXPECT_LT(max_rel_error(to_doubles(vars[i]->value().gather()), ref.vars()[i].theta), 1e-5)
              << vars[i]->path();
        }
        // evaluate: the reference's loss of the trained weights (a step with learning rate 0).
        RefClassifier trained(*model, !from_logits);
        RefOptimizer none("sgd", {.learning_rate = 0.0});
        const double want_eval = trained.fit(x, y, kRows, 1, none)[0];
        EXPECT_NEAR(trainer.evaluate(x, y, {.batch_size = kRows}), want_eval, 1e-5 * want_eval);
        std::printf("%s %s %s: loss %.6f -> %.6f (reference %.6f -> %.6f)\n",
                    from_logits ? "logits" : "softmax", kind.c_str(), c.name.c_str(),
                    h.loss.front(), h.loss.back(), want.front(), want.back());
      }
    }
  }
  // A target the loss cannot take: integer class indices (the sparse loss's), named.
  auto model = make_classifier(true);
  Trainer trainer = compile(model, {.optimizer = "sgd", .loss = "categorical_crossentropy"});
  const std::string msg = testing::ValueErrorMessage([&] {
    (void)trainer.fit(x, HostTensor(DType::kI32, {kRows, kClasses}), {.verbose = 0});
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "I32")) << msg;
}

class NoBackward : public Model {
 public:
  NoBackward() { d = track("d", std::make_shared<Dense>(2)); }
  Tensor call(const Tensor& x) override { return (*d)(x); }
  std::shared_ptr<Dense> d;
};

TEST_F(TrainerTest, UnbuiltModelsAndModelsWithoutBackwardAreFailedPreconditions) {
  const auto [x, y] = regression_data();
  auto unbuilt =
      std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{std::make_shared<Dense>(2)});
  Trainer t1 = compile(unbuilt, {.optimizer = "sgd", .loss = "mse"});
  try {
    (void)t1.fit(x, y, {.verbose = 0});
    ADD_FAILURE() << "no error";
  } catch (const FailedPreconditionError& e) {
    EXPECT_TRUE(testing::HasSubstr(e.what(), "not built"));
  }
  auto one = std::make_shared<DataParallel>(DeviceMesh(std::vector<int64_t>{1},
                                                       std::vector<std::string>{"batch"},
                                                       std::vector<std::string>{"cpu:0"}));
  std::shared_ptr<NoBackward> sub;
  {
    DistributionScope scope = one->scope();
    sub = std::make_shared<NoBackward>();
  }
  (void)(*sub)(Tensor(one->distribute_input(x)));  // builds
  Trainer t2 = compile(sub, {.optimizer = "sgd", .loss = "mse"});
  EXPECT_THROW((void)t2.fit(x, y, {.verbose = 0}), FailedPreconditionError);
  EXPECT_EQ(t2.optimizer().iterations(), 0);
}

TEST_F(TrainerTest, ProgressOutput) {
  const auto [x, y] = regression_data();
  auto model = build(nullptr);
  Trainer trainer = compile(model, {.optimizer = "sgd", .loss = "mse"});
  std::ostringstream line, silent;
  (void)trainer.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = 2, .out = &line});
  EXPECT_TRUE(testing::HasSubstr(line.str(), "Epoch 1/2\n3/3 - "));
  EXPECT_TRUE(testing::HasSubstr(line.str(), "Epoch 2/2\n3/3 - "));
  EXPECT_TRUE(testing::HasSubstr(line.str(), "/step - loss: "));
  (void)trainer.fit(x, y, {.batch_size = 8, .verbose = 0, .out = &silent});
  EXPECT_EQ(silent.str(), "");
  EXPECT_EQ(progress_mode(1, /*terminal=*/true), ProgressMode::kBar);
  EXPECT_EQ(progress_mode(1, /*terminal=*/false), ProgressMode::kLine);
  const std::string bar = EpochProgress::render_bar(1, 3, 0.5, 0.25);
  EXPECT_TRUE(testing::HasSubstr(bar, "1/3 \u2501\u2501\u2501\u2501\u2501\u2501\u2500")) << bar;
  EXPECT_TRUE(testing::HasSubstr(bar, "- loss: 0.2500")) << bar;
}

}  // namespace
}  // namespace meshlayout
