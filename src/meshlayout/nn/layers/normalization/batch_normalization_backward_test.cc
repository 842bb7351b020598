// BatchNormalization training mode and backward against float64 references written from the
// formulas and their central differences, on the 2x4 mesh: x replicated, batch-split over
// 'data' (the statistics over the global batch), over both axes, split on a middle or the
// feature dimension; weights replicated or split. Training mode: batch statistics, dx through
// them, moving statistics updated by a call but not by recompute; inference mode: moving
// statistics, dx = gamma/σ·dy. d gamma and d beta in their variables' layouts; none for the
// moving statistics. All of it again in float64 (built under FloatxScope F64): y within 1e-12,
// dx and the weights' gradients within 1e-10 of a five-point stencil, the moving statistics
// updated in F64; F32 x or dy refused naming both dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/normalization/batch_normalization.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;
constexpr int64_t kFeatures = 8;
constexpr double kEpsilon = 1e-3;

// Per feature: the batch mean and biased variance of x (rows of kFeatures).
std::pair<std::vector<double>, std::vector<double>> batch_moments(const std::vector<double>& x) {
  const size_t n = x.size() / kFeatures;
  std::vector<double> mean(kFeatures), var(kFeatures);
  for (size_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < kFeatures; ++c)
      mean[c] += x[r * kFeatures + c] / static_cast<double>(n);
  for (size_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < kFeatures; ++c) {
      const double d = x[r * kFeatures + c] - mean[c];
      var[c] += d * d / static_cast<double>(n);
    }
  return {mean, var};
}

// y = (x - mean)/sqrt(var + eps)·gamma + beta; batch statistics when training, else the
// moving ones ("moving_mean", "moving_variance" in q). gamma/beta absent: 1/0.
std::vector<double> reference(const Params& q, bool training) {
  const std::vector<double>& x = q.at("x");
  auto [mean, var] =
      training ? batch_moments(x) : std::pair{q.at("moving_mean"), q.at("moving_variance")};
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / kFeatures; ++r)
    for (int64_t c = 0; c < kFeatures; ++c) {
      double v = (x[r * kFeatures + c] - mean[c]) / std::sqrt(var[c] + kEpsilon);
      if (q.contains("gamma")) v *= q.at("gamma")[c];
      if (q.contains("beta")) v += q.at("beta")[c];
      y[r * kFeatures + c] = v;
    }
  return y;
}

class BatchNormalizationBackwardTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  std::vector<std::pair<TensorLayout, TensorLayout>> cases() const {  // (x (8, 3, 8), weights)
    return {{layout({kNone, kNone, kNone}), layout({kNone})},
            {layout({{"data"}, kNone, kNone}), layout({kNone})},
            {layout({{"data", "model"}, kNone, kNone}), layout({kNone})},
            {layout({{"data"}, kNone, {"model"}}), layout({{"model"}})},
            {layout({{"data"}, {"model"}, kNone}), layout({{"data"}})},
            {layout({kNone, kNone, {"data", "model"}}), layout({{"model"}})}};
  }

  std::shared_ptr<BatchNormalization> make(const TensorLayout& w, bool center = true,
                                           bool scale = true, DType dtype = DType::kF32) {
    clear_session();
    FloatxScope floatx(dtype);
    auto bn = std::make_shared<BatchNormalization>(BatchNormalizationOptions{
        .epsilon = kEpsilon,
        .momentum = 0.9,
        .center = center,
        .scale = scale,
        .beta_initializer = Initializer::random_normal({.stddev = 0.3, .seed = 10}),
        .gamma_initializer = Initializer::random_normal({.mean = 1.0, .stddev = 0.3, .seed = 11}),
        .moving_mean_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 12}),
        .moving_variance_initializer =
            Initializer::random_uniform({.minval = 0.5, .maxval = 2.0, .seed = 13}),
        .beta_layout = w,
        .gamma_layout = w,
        .moving_mean_layout = w,
        .moving_variance_layout = w});
    bn->maybe_build({8, 3, kFeatures});
    EXPECT_EQ(bn->moving_mean()->dtype(), dtype);
    return bn;
  }

  // Checks y, dx and each trainable weight's gradient; x (8, 3, 8) with a per-feature offset.
  // In F64 (the layer built in F64): y to 1e-12, gradients to 1e-10 of a five-point stencil.
  void check(BatchNormalization& bn, const TensorLayout& x_layout,
             const Shape& shape = {8, 3, kFeatures}, DType dtype = DType::kF32) {
    const bool f64 = dtype == DType::kF64;
    std::vector<double> xv = testing::random_values(shape, 61);
    for (size_t i = 0; i < xv.size(); ++i)
      xv[i] = static_cast<float>(xv[i] + 0.1 * static_cast<double>(i % kFeatures));
    const Array x = distribute_tensor(testing::to_dtype(shape, xv, dtype), x_layout);
    Params p{{"x", xv},
             {"moving_mean", gathered_f64(bn.moving_mean()->value())},
             {"moving_variance", gathered_f64(bn.moving_variance()->value())}};
    std::vector<std::pair<VariablePtr, std::string>> weights;
    if (bn.gamma()) weights.emplace_back(bn.gamma(), "gamma");
    if (bn.beta()) weights.emplace_back(bn.beta(), "beta");
    for (const auto& [v, name] : weights) p[name] = gathered_f64(v->value());
    const bool training = bn.training();
    auto forward = [training](const Params& q) { return reference(q, training); };
    const Array y = bn.recompute(x);  // no moving-statistics update
    EXPECT_EQ(y.layout(), x.layout());
    EXPECT_EQ(y.dtype(), dtype);
    expect_close(gathered_f64(y), forward(p), "forward y", f64 ? 1e-12 : 1e-4);
    expect_close(gathered_f64(bn.moving_mean()->value()), p.at("moving_mean"),
                 "moving_mean after recompute", 0);
    const std::vector<double> w = testing::random_values(shape, 62);
    const Array dy = distribute_tensor(testing::to_dtype(shape, w, dtype), y.layout());
    Gradients grads;
    const Array dx = bn.backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    EXPECT_EQ(dx.dtype(), dtype);
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w, f64 ? 1e-3 : 1e-5, f64),
                 "dx", f64 ? 1e-10 : 1e-4);
    EXPECT_EQ(grads.size(), weights.size());
    EXPECT_EQ(grads.find(*bn.moving_mean()), nullptr);
    EXPECT_EQ(grads.find(*bn.moving_variance()), nullptr);
    testing::expect_weight_gradients(grads, weights, forward, p, w, f64);
  }
};

TEST_F(BatchNormalizationBackwardTest, TrainingUsesGlobalBatchStatistics) {
  for (const auto& [x_layout, w_layout] : cases()) {
    SCOPED_TRACE("x " + x_layout.to_string() + " weights " + w_layout.to_string());
    auto bn = make(w_layout);
    bn->set_training(true);
    check(*bn, x_layout);
  }
}

TEST_F(BatchNormalizationBackwardTest, InferenceUsesMovingStatistics) {
  for (const auto& [x_layout, w_layout] : cases()) {
    SCOPED_TRACE("x " + x_layout.to_string() + " weights " + w_layout.to_string());
    auto bn = make(w_layout);
    check(*bn, x_layout);
  }
}

TEST_F(BatchNormalizationBackwardTest, WithoutGammaOrBetaAndRank2) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    auto no_gamma = make(layout({{"model"}}), /*center=*/true, /*scale=*/false);
    no_gamma->set_training(training);
    check(*no_gamma, layout({{"data"}, kNone, {"model"}}));
    auto no_beta = make(layout({kNone}), /*center=*/false, /*scale=*/true);
    no_beta->set_training(training);
    check(*no_beta, layout({{"data"}, kNone}), {16, kFeatures});
  }
}

TEST_F(BatchNormalizationBackwardTest, TrainingCallUpdatesMovingStatistics) {
  auto bn = make(layout({{"model"}}));
  bn->set_training(true);
  const Shape shape{8, 3, kFeatures};
  const std::vector<double> xv = testing::random_values(shape, 5, 2.0);
  const std::vector<double> mean0 = gathered_f64(bn->moving_mean()->value());
  const std::vector<double> var0 = gathered_f64(bn->moving_variance()->value());
  const Array y =
      bn->call_on(distribute_tensor(testing::to_f32(shape, xv), layout({{"data"}, kNone, kNone})));
  const auto [mean, var] = batch_moments(xv);
  std::vector<double> want_mean(kFeatures), want_var(kFeatures);
  for (int64_t c = 0; c < kFeatures; ++c) {
    want_mean[c] = 0.9 * mean0[c] + 0.1 * mean[c];
    want_var[c] = 0.9 * var0[c] + 0.1 * var[c];
  }
  EXPECT_EQ(bn->moving_mean()->value().layout(), layout({{"model"}}));
  expect_close(gathered_f64(bn->moving_mean()->value()), want_mean, "moving_mean", 1e-5);
  expect_close(gathered_f64(bn->moving_variance()->value()), want_var, "moving_variance", 1e-5);
  // Inference afterwards normalises with the updated moving statistics.
  bn->set_training(false);
  const Array x2 = distribute_tensor(testing::to_f32(shape, xv), layout({kNone, kNone, kNone}));
  Params p{{"x", xv},
           {"moving_mean", want_mean},
           {"moving_variance", want_var},
           {"gamma", gathered_f64(bn->gamma()->value())},
           {"beta", gathered_f64(bn->beta()->value())}};
  expect_close(gathered_f64(bn->call_on(x2)), reference(p, false), "inference y", 1e-5);
}

TEST_F(BatchNormalizationBackwardTest, Float64TrainingAndInference) {
  for (bool training : {true, false}) {
    for (const auto& [x_layout, w_layout] : cases()) {
      SCOPED_TRACE(std::string(training ? "training" : "inference") + " x " + x_layout.to_string() +
                   " weights " + w_layout.to_string());
      auto bn = make(w_layout, true, true, DType::kF64);
      bn->set_training(training);
      check(*bn, x_layout, {8, 3, kFeatures}, DType::kF64);
    }
    auto no_gamma = make(layout({{"model"}}), /*center=*/true, /*scale=*/false, DType::kF64);
    no_gamma->set_training(training);
    check(*no_gamma, layout({{"data"}, kNone, {"model"}}), {8, 3, kFeatures}, DType::kF64);
  }
}

// A training call in F64 updates the moving statistics in F64 (to 1e-14 of the formula, where
// F32 would be ~1e-8 off), sharded over 'model', x batch-split.
TEST_F(BatchNormalizationBackwardTest, Float64TrainingCallUpdatesMovingStatistics) {
  auto bn = make(layout({{"model"}}), true, true, DType::kF64);
  bn->set_training(true);
  const Shape shape{8, 3, kFeatures};
  std::vector<double> xv = testing::random_values(shape, 5, 2.0);
  for (double& v : xv) v += 1e-9;  // not float32 values
  const std::vector<double> mean0 = gathered_f64(bn->moving_mean()->value());
  const std::vector<double> var0 = gathered_f64(bn->moving_variance()->value());
  (void)bn->call_on(distribute_tensor(testing::to_dtype(shape, xv, DType::kF64),
                                      layout({{"data"}, kNone, kNone})));
  const auto [mean, var] = batch_moments(xv);
  std::vector<double> want_mean(kFeatures), want_var(kFeatures);
  for (int64_t c = 0; c < kFeatures; ++c) {
    want_mean[c] = 0.9 * mean0[c] + 0.1 * mean[c];
    want_var[c] = 0.9 * var0[c] + 0.1 * var[c];
  }
  EXPECT_EQ(bn->moving_mean()->value().dtype(), DType::kF64);
  EXPECT_EQ(bn->moving_mean()->value().layout(), layout({{"model"}}));
  expect_close(gathered_f64(bn->moving_mean()->value()), want_mean, "moving_mean", 1e-13);
  expect_close(gathered_f64(bn->moving_variance()->value()), want_var, "moving_variance", 1e-13);
}

// Built in F64: an F32 x (call and backward) or dy is refused, naming both dtypes.
TEST_F(BatchNormalizationBackwardTest, Float64RefusesF32) {
  auto bn = make(layout({kNone}), true, true, DType::kF64);
  const Shape shape{4, kFeatures};
  const std::vector<double> v = testing::random_values(shape, 3);
  const Array x64 =
      distribute_tensor(testing::to_dtype(shape, v, DType::kF64), layout({kNone, kNone}));
  const Array x32 =
      distribute_tensor(testing::to_dtype(shape, v, DType::kF32), layout({kNone, kNone}));
  const std::string want =
      "BatchNormalization layer 'batch_normalization' computes in F64 (its weights' dtype), got an "
      "F32 input; "
      "layers do not cast: convert the input first";
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)bn->call_on(x32); }), want);
  Gradients grads;
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)bn->backward(x32, x64, grads); }), want);
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)bn->backward(x64, x32, grads); }),
            "backward of layer 'batch_normalization': dy must be F64 of the call's output shape "
            "(4, 8), got "
            "F32 (4, 8)");
  EXPECT_EQ(grads.size(), 0u);
}

TEST_F(BatchNormalizationBackwardTest, MaxRelativeError) {
  auto bn = make(layout({{"model"}}));
  bn->set_training(true);
  check(*bn, layout({{"data"}, kNone, {"model"}}));
  std::printf("max relative error seen: %.3g\n", testing::max_relative_error_seen());
}

TEST_F(BatchNormalizationBackwardTest, RefusesBadDyAndUnbuiltLayer) {
  Gradients grads;
  const Array x =
      distribute_tensor(HostTensor::random(DType::kF32, {4, kFeatures}, 1), layout({kNone, kNone}));
  BatchNormalization unbuilt;
  EXPECT_THROW((void)unbuilt.backward(x, x, grads), FailedPreconditionError);
  auto bn = make(layout({kNone}));
  const Array dy =
      distribute_tensor(HostTensor::random(DType::kF32, {3, kFeatures}, 1), layout({kNone, kNone}));
  EXPECT_THROW((void)bn->backward(x, dy, grads), ValueError);
  const Array x7 =
      distribute_tensor(HostTensor::random(DType::kF32, {4, 7}, 1), layout({kNone, kNone}));
  EXPECT_THROW((void)bn->backward(x7, x7, grads), ValueError);
  EXPECT_EQ(grads.size(), 0u);
}

}  // namespace
}  // namespace meshlayout
