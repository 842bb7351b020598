// fit under mpirun (np 2 and 4): DataParallel over every device and ModelParallel on a
// (2, n/2) mesh, each process feeding only its rows of each global batch, give the one-process
// float64 reference's history (trainer_test_util.h), a partial last batch included (one not
// divisible by the data shards too); evaluate/predict equal the forward; Keras' divisibility
// error and a bad input on one process only are thrown by every process. With regularisers,
// fit and evaluate include the penalties (and fit their gradients) as the reference does.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/name_scope.h"
#include "meshlayout/runtime/runtime.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/train/trainer.h"
#include "meshlayout/train/trainer_test_util.h"

namespace meshlayout {
namespace {

std::shared_ptr<Sequential> build(const Distribution& dist, const MlpRegularizers& reg = {}) {
  clear_session();
  DistributionScope scope = dist.scope();
  return make_mlp(reg);
}

std::shared_ptr<const Distribution> model_parallel() {
  auto rt = default_runtime();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  LayoutMap map(mesh);
  map["d1/kernel"] = {None, "model"};
  map["d1/bias"] = {"model"};
  map["d2/kernel"] = {"model", None};
  return std::make_shared<ModelParallel>(map, "data");
}

TEST(TrainerMpiTest, FitFeedingEachProcessItsRowsGivesTheOneProcessHistory) {
  const std::vector<std::pair<std::string, std::shared_ptr<const Distribution>>> configs = {
      {"DataParallel", std::make_shared<DataParallel>()}, {"ModelParallel", model_parallel()}};
  for (const int64_t rows : {20, 22}) {  // last batch 4 rows, or 6 (not divisible by 4 shards)
    const auto [x, y] = regression_data(rows);
    for (const auto& [name, dist] : configs) {
      SCOPED_TRACE(name + " rows " + std::to_string(rows));
      auto model = build(*dist);
      RefMlp ref(*model);
      const OptimizerOptions opts{.learning_rate = 0.01};
      const std::vector<double> want = ref.fit(x, y, 8, 3, RefOptimizer("adam", opts));
      Trainer trainer =
          compile(model, {.optimizer = "adam", .optimizer_options = opts, .loss = "mse"});
      std::vector<double> seen;
      const History h = trainer.fit(
          x, y,
          {.batch_size = 8, .epochs = 3, .verbose = 0, .on_epoch_end = [&](int64_t, double l) {
             seen.push_back(l);
           }});
      expect_history_near(h.loss, want, 1e-5);
      EXPECT_EQ(seen, h.loss);
      EXPECT_LT(h.loss.back(), h.loss.front());
      // Every process got the same doubles.
      auto rt = default_runtime();
      std::vector<double> all(h.loss.size() * static_cast<size_t>(rt->num_processes()));
      rt->comm().all_gather(h.loss.data(), h.loss.size() * sizeof(double), all.data());
      for (int p = 0; p < rt->num_processes(); ++p) {
        EXPECT_EQ(std::vector<double>(all.begin() + p * 3, all.begin() + p * 3 + 3), h.loss)
            << "process " << p;
      }
      RefMlp trained(*model);
      const std::vector<double> fwd = trained.forward(to_doubles(x), rows);
      EXPECT_LT(max_rel_error(to_doubles(trainer.predict(x, {.batch_size = 8})), fwd), 1e-5);
      const double loss = trainer.evaluate(x, y, {.batch_size = 4});
      EXPECT_NEAR(loss, RefMlp::mse(fwd, to_doubles(y)), 1e-5 * loss);
    }
  }
}

// With kernel/bias regularisers, each process holding only its shards of the weights: fit's
// history and trained weights are the float64 reference's that includes the penalties and
// their gradients, the history is not the unregularised one, and evaluate adds the penalty.
TEST(TrainerMpiTest, FitWithRegularisersGivesTheReferenceThatIncludesThePenalty) {
  const std::vector<std::pair<std::string, std::shared_ptr<const Distribution>>> configs = {
      {"DataParallel", std::make_shared<DataParallel>()}, {"ModelParallel", model_parallel()}};
  const auto [x, y] = regression_data();
  const OptimizerOptions opts{.learning_rate = 0.01};
  for (const auto& [name, dist] : configs) {
    SCOPED_TRACE(name);
    const History plain =
        compile(build(*dist), {.optimizer = "adam", .optimizer_options = opts, .loss = "mse"})
            .fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0});
    auto model = build(*dist, mlp_regularizers());
    RefMlp ref(*model);
    const double initial_penalty = ref.penalty();
    const std::vector<double> want = ref.fit(x, y, 8, 3, RefOptimizer("adam", opts));
    Trainer trainer =
        compile(model, {.optimizer = "adam", .optimizer_options = opts, .loss = "mse"});
    const History h = trainer.fit(x, y, {.batch_size = 8, .epochs = 3, .verbose = 0});
    expect_history_near(h.loss, want, 1e-5);
    EXPECT_NEAR(h.loss[0] - plain.loss[0], initial_penalty, 0.2 * initial_penalty);
    const std::vector<VariablePtr> vars = model->variables();
    ASSERT_EQ(vars.size(), ref.vars().size());
    for (size_t i = 0; i < vars.size(); ++i) {
      EXPECT_LT(max_rel_error(to_doubles(vars[i]->value().gather()), ref.vars()[i].theta), 1e-5)
          << vars[i]->path();
    }
    RefMlp trained(*model);
    const double loss = trainer.evaluate(x, y, {.batch_size = 4});
    EXPECT_NEAR(
        loss, RefMlp::mse(trained.forward(to_doubles(x), kRows), to_doubles(y)) + trained.penalty(),
        1e-5 * loss);
    EXPECT_GT(trained.penalty(), 100 * 1e-5 * loss);
  }
}

TEST(TrainerMpiTest, ErrorsAreThrownByEveryProcess) {
  auto rt = default_runtime();
  const auto [x, y] = regression_data();
  const auto dist = std::make_shared<DataParallel>();
  auto model = build(*dist);
  Trainer trainer = compile(model, {.optimizer = "sgd", .loss = "mse"});
  // Keras: the global batch must be divisible by the data shards (min(replicas, processes)).
  std::string msg =
      testing::ValueErrorMessage([&] { (void)trainer.fit(x, y, {.batch_size = 7, .verbose = 0}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "divisible")) << msg;
  // A bad y on process 1 only: every process throws.
  HostTensor short_y(DType::kF32, {kRows - 1, kOut});
  msg = testing::ValueErrorMessage([&] {
    (void)trainer.fit(x, rt->process_id() == 1 ? short_y : y, {.batch_size = 8, .verbose = 0});
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "(19, 2)")) << msg;
  // NaN on every process alike: stopped at the same step everywhere.
  HostTensor bad_y = y;
  bad_y.data_as<float>()[17 * kOut + 1] = std::nanf("");
  msg = testing::ValueErrorMessage(
      [&] { (void)trainer.fit(x, bad_y, {.batch_size = 8, .verbose = 0}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "epoch 0, step 2")) << msg;
  EXPECT_EQ(trainer.optimizer().iterations(), 2);
}

}  // namespace
}  // namespace meshlayout
