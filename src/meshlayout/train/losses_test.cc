// Mean squared error value and gradient against a float64 host reference and central
// differences, in replicated, row-, column-, 2-D and uneven layouts on the 2 x 4 mesh; the
// Loss objects (names, the (sparse) categorical cross-entropy wrappers, from logits and from
// probabilities, label smoothing) and their errors.
#include "meshlayout/train/losses.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/ops/cross_entropy.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::gathered_f64;
using testing::random_values;
using testing::to_f32;

class LossesTest : public NnTest {};

double mse_reference(const std::vector<double>& p, const std::vector<double>& t) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) s += (p[i] - t[i]) * (p[i] - t[i]);
  return s / static_cast<double>(p.size());
}

void expect_rel(double got, double want, double tol, const std::string& what) {
  EXPECT_LE(std::abs(got - want), tol * std::max(1.0, std::abs(want)))
      << what << ": " << got << " vs " << want;
}

TEST_F(LossesTest, MeanSquaredErrorValueAndGradientInEveryLayout) {
  struct Case {
    Shape shape;
    std::vector<DimSharding> pred_axes, true_axes;
  };
  const std::vector<Case> cases = {
      {{4, 3}, {None, None}, {None, None}},
      {{4, 3}, {"data", None}, {None, None}},
      {{6, 8}, {None, "model"}, {"data", None}},
      {{6, 8}, {"data", "model"}, {"data", "model"}},
      {{5, 7}, {"data", "model"}, {None, "model"}},  // uneven blocks, some empty
      {{3, 2, 5}, {"data", None, "model"}, {None, None, None}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_to_string(c.shape));
    const std::vector<double> p = random_values(c.shape, 11), t = random_values(c.shape, 12);
    const Array pred = distribute_tensor(to_f32(c.shape, p), TensorLayout(c.pred_axes, mesh_));
    const Array targ = distribute_tensor(to_f32(c.shape, t), TensorLayout(c.true_axes, mesh_));
    const double want = mse_reference(p, t);
    expect_rel(mean_squared_error(pred, targ), want, 1e-12, "value");
    LossResult r = mean_squared_error_with_grad(pred, targ);
    expect_rel(r.value, want, 1e-12, "with_grad value");
    EXPECT_EQ(r.gradient.layout(), pred.layout());
    EXPECT_EQ(r.gradient.dtype(), DType::kF32);
    // Central differences of the float64 reference.
    testing::Params params{{"p", p}};
    const auto forward = [&](const testing::Params& q) {
      return std::vector<double>{mse_reference(q.at("p"), t)};
    };
    testing::expect_close(gathered_f64(r.gradient),
                          testing::numeric_gradient(forward, params, "p", {1.0}),
                          "d mse / d y_pred");
    testing::expect_close(
        gathered_f64(mean_squared_error_backward(pred, targ, 3.0)),
        [&] {
          std::vector<double> g = testing::numeric_gradient(forward, params, "p", {1.0});
          for (double& v : g) v *= 3.0;
          return g;
        }(),
        "grad_scale 3");
  }
}

TEST_F(LossesTest, MeanSquaredErrorInFloat64) {
  const Shape shape{4, 2};
  const std::vector<double> p = random_values(shape, 3), t = random_values(shape, 4);
  HostTensor p64(DType::kF64, shape), t64(DType::kF64, shape);
  for (size_t i = 0; i < p.size(); ++i) {
    p64.data_as<double>()[i] = p[i] / 3.0;
    t64.data_as<double>()[i] = t[i] / 7.0;
  }
  const Array pred = distribute_tensor(p64, TensorLayout({"data", None}, mesh_));
  const Array targ = distribute_tensor(t64, TensorLayout({None, None}, mesh_));
  const LossResult r = mean_squared_error_with_grad(pred, targ);
  EXPECT_NEAR(r.value, mse_reference(testing::to_f64(p64), testing::to_f64(t64)), 1e-15);
  EXPECT_EQ(r.gradient.dtype(), DType::kF64);
}

TEST_F(LossesTest, MeanSquaredErrorRejectsMismatchedShapesAndIntegerTargets) {
  const Array pred =
      distribute_tensor(HostTensor(DType::kF32, {4, 3}), TensorLayout({None, None}, mesh_));
  const Array wrong =
      distribute_tensor(HostTensor(DType::kF32, {4, 2}), TensorLayout({None, None}, mesh_));
  const Array ints =
      distribute_tensor(HostTensor(DType::kI32, {4, 3}), TensorLayout({None, None}, mesh_));
  std::string msg = testing::ValueErrorMessage([&] { (void)mean_squared_error(pred, wrong); });
  EXPECT_TRUE(testing::HasSubstr(msg, "(4, 2)"));
  EXPECT_TRUE(testing::HasSubstr(msg, "(4, 3)"));
  msg = testing::ValueErrorMessage([&] { (void)mean_squared_error_with_grad(pred, ints); });
  EXPECT_TRUE(testing::HasSubstr(msg, "I32"));
}

// mean((p − t)², axis=-1) of every row, as Keras' mean_squared_error before the reduction.
std::vector<double> mse_rows_reference(const Shape& shape, const std::vector<double>& p,
                                       const std::vector<double>& t) {
  const int64_t last = shape.back();
  std::vector<double> rows(p.size() / static_cast<size_t>(last));
  for (size_t r = 0; r < rows.size(); ++r) {
    double s = 0;
    for (int64_t j = 0; j < last; ++j) {
      const size_t k = r * static_cast<size_t>(last) + static_cast<size_t>(j);
      s += (p[k] - t[k]) * (p[k] - t[k]);
    }
    rows[r] = s / static_cast<double>(last);
  }
  return rows;
}

// Keras reduction "none": the row means in y_pred's dtype, laid out as y_pred without the last
// dim, for the last dim whole, split over 4 and over 8 (uneven, empty blocks), rows split, 2-D;
// their mean is mean_squared_error.
TEST_F(LossesTest, MeanSquaredErrorValuesInEveryLayout) {
  struct Case {
    Shape shape;
    std::vector<DimSharding> pred_axes, true_axes;
  };
  const std::vector<Case> cases = {
      {{4, 3}, {None, None}, {None, None}},
      {{4, 3}, {"data", None}, {None, "model"}},
      {{6, 8}, {None, "model"}, {"data", None}},
      {{6, 8}, {"data", "model"}, {"data", "model"}},
      {{5, 7}, {"data", "model"}, {None, "model"}},           // uneven blocks, some empty
      {{4, 10}, {None, {"data", "model"}}, {"model", None}},  // 10 over 8
      {{3, 2, 5}, {"data", None, "model"}, {None, None, None}},
      {{2, 4, 6}, {"model", "data", None}, {None, None, "model"}},
      {{5}, {"model"}, {None}},  // rank 1: one row, a scalar
  };
  for (const Case& c : cases) {
    for (const DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(shape_to_string(c.shape) + " " + std::string(dtype_name(dtype)) + " " +
                   TensorLayout(c.pred_axes).to_string());
      const std::vector<double> p = random_values(c.shape, 21), t = random_values(c.shape, 22);
      const Array pred =
          distribute_tensor(testing::to_dtype(c.shape, p, dtype), TensorLayout(c.pred_axes, mesh_));
      const Array targ =
          distribute_tensor(testing::to_dtype(c.shape, t, dtype), TensorLayout(c.true_axes, mesh_));
      const Array v = mean_squared_error_values(pred, targ);
      const Shape lead(c.shape.begin(), c.shape.end() - 1);
      EXPECT_EQ(v.shape(), lead);
      EXPECT_EQ(v.dtype(), dtype);
      EXPECT_EQ(v.layout(),
                TensorLayout(std::vector<DimSharding>(c.pred_axes.begin(), c.pred_axes.end() - 1),
                             mesh_));
      const std::vector<double> got = gathered_f64(v), want = mse_rows_reference(c.shape, p, t);
      ASSERT_EQ(got.size(), want.size());
      double sum = 0;
      for (size_t r = 0; r < want.size(); ++r) {
        expect_rel(got[r], want[r], dtype == DType::kF32 ? 1e-5 : 1e-12,
                   "row " + std::to_string(r));
        sum += got[r];
      }
      if (dtype == DType::kF64) {
        expect_rel(sum / static_cast<double>(want.size()), mean_squared_error(pred, targ), 1e-12,
                   "mean of the values vs mean_squared_error");
      }
    }
  }
}

TEST_F(LossesTest, MeanSquaredErrorValuesRejectMismatchedShapesAndIntegerTargets) {
  const Array pred =
      distribute_tensor(HostTensor(DType::kF32, {4, 3}), TensorLayout({"data", "model"}, mesh_));
  const Array wrong =
      distribute_tensor(HostTensor(DType::kF32, {4, 2}), TensorLayout({None, None}, mesh_));
  const Array ints =
      distribute_tensor(HostTensor(DType::kI32, {4, 3}), TensorLayout({None, None}, mesh_));
  std::string msg =
      testing::ValueErrorMessage([&] { (void)mean_squared_error_values(pred, wrong); });
  EXPECT_EQ(msg, "mean_squared_error: y_true of shape (4, 2) must have the shape of y_pred (4, 3)");
  msg = testing::ValueErrorMessage([&] { (void)mean_squared_error_values(pred, ints); });
  EXPECT_TRUE(testing::HasSubstr(msg, "y_true I32 (4, 3)"));
  const Array scalar = distribute_tensor(HostTensor(DType::kF32, {}),
                                         TensorLayout(std::vector<DimSharding>{}, mesh_));
  msg = testing::ValueErrorMessage([&] { (void)mean_squared_error_values(scalar, scalar); });
  EXPECT_TRUE(testing::HasSubstr(msg, "y_pred needs a last dimension"));
}

TEST_F(LossesTest, MakeLossNamesAndErrors) {
  EXPECT_EQ(make_loss("mse")->name(), "mean_squared_error");
  EXPECT_EQ(make_loss("mean_squared_error")->name(), "mean_squared_error");
  EXPECT_EQ(make_loss("sparse_categorical_crossentropy", {.from_logits = true})->name(),
            "sparse_categorical_crossentropy");
  std::string msg = testing::ValueErrorMessage([] { (void)make_loss("mae"); });
  EXPECT_TRUE(testing::HasSubstr(msg, "'mae'"));
  for (const std::string& name : loss_names()) EXPECT_TRUE(testing::HasSubstr(msg, name));
  EXPECT_EQ(make_loss("sparse_categorical_crossentropy")->name(),
            "sparse_categorical_crossentropy");
  EXPECT_EQ(make_loss("categorical_crossentropy")->name(), "categorical_crossentropy");
  EXPECT_EQ(loss_names(),
            (std::vector<std::string>{"mean_squared_error", "mse", "categorical_crossentropy",
                                      "sparse_categorical_crossentropy"}));
  EXPECT_TRUE(testing::HasSubstr(msg, "'categorical_crossentropy'"));
  msg = testing::ValueErrorMessage(
      [] { (void)make_loss("categorical_crossentropy", {.label_smoothing = -0.5}); });
  EXPECT_TRUE(testing::HasSubstr(msg, "label_smoothing must be in [0, 1], got -0.5"));
  msg = testing::ValueErrorMessage([] {
    (void)make_loss("sparse_categorical_crossentropy",
                    {.from_logits = true, .label_smoothing = 0.1});
  });
  EXPECT_TRUE(
      testing::HasSubstr(msg,
                         "'sparse_categorical_crossentropy': label_smoothing is an argument of "
                         "categorical_crossentropy only, got 0.1"));
  msg = testing::ValueErrorMessage([] { (void)make_loss("categorical_crossentropyy"); });
  EXPECT_TRUE(testing::HasSubstr(msg, "unknown loss 'categorical_crossentropyy'"));
  const auto mse = make_loss("mse");
  msg = testing::ValueErrorMessage([&] { mse->check({4, 1}, DType::kF32, {4}, DType::kF32); });
  EXPECT_TRUE(testing::HasSubstr(msg, "(4,)"));
  const auto scce = make_loss("sparse_categorical_crossentropy", {.from_logits = true});
  msg = testing::ValueErrorMessage([&] { scce->check({4, 5}, DType::kF32, {4}, DType::kF32); });
  EXPECT_TRUE(testing::HasSubstr(msg, "F32"));
  EXPECT_NO_THROW(scce->check({4, 5}, DType::kF32, {4}, DType::kI32));
}

// compile("categorical_crossentropy", from_logits) is the vocab-parallel op with Keras'
// options: from probabilities by default, label smoothing passed on; its check() names the
// shapes and dtypes.
TEST_F(LossesTest, CategoricalCrossentropyLossWrapsTheVocabParallelOp) {
  const Shape shape{4, 10};
  std::vector<double> p = random_values(shape, 7), t(40, 0.0);
  for (double& v : p) v = std::exp(v);  // positive, not normalised
  for (int i = 0; i < 4; ++i) t[static_cast<size_t>(i * 10 + (3 * i + 2) % 10)] = 1.0;
  const Array pred = distribute_tensor(to_f32(shape, p), TensorLayout({"data", "model"}, mesh_));
  const Array targ = distribute_tensor(to_f32(shape, t), TensorLayout({None, "model"}, mesh_));
  // −mean log(p[label] / Σp): the probabilities reading, by hand.
  double want = 0;
  for (int i = 0; i < 4; ++i) {
    double s = 0;
    for (int j = 0; j < 10; ++j)
      s += static_cast<double>(static_cast<float>(p[static_cast<size_t>(i * 10 + j)]));
    want -= std::log(
        static_cast<double>(static_cast<float>(p[static_cast<size_t>(i * 10 + (3 * i + 2) % 10)])) /
        s);
  }
  want /= 4;
  const auto probs = make_loss("categorical_crossentropy");
  const LossResult r = probs->value_and_gradient(pred, targ);
  expect_rel(r.value, want, 1e-12, "from probabilities");
  EXPECT_EQ(probs->value(pred, targ), r.value);
  const CrossEntropyResult op =
      categorical_crossentropy_with_grad(pred, targ, {.from_logits = false});
  EXPECT_EQ(r.gradient.gather(), op.dlogits.gather());
  EXPECT_EQ(r.gradient.layout(), pred.layout());
  for (const double ls : {0.0, 0.2}) {
    const auto logits =
        make_loss("categorical_crossentropy", {.from_logits = true, .label_smoothing = ls});
    const CrossEntropyResult want_l = categorical_crossentropy_with_grad(
        pred, targ, {.from_logits = true, .label_smoothing = ls});
    const LossResult got = logits->value_and_gradient(pred, targ);
    EXPECT_EQ(got.value, want_l.loss);
    EXPECT_EQ(got.gradient.gather(), want_l.dlogits.gather());
    EXPECT_NE(got.value, r.value);
  }
  EXPECT_NE(make_loss("categorical_crossentropy", {.from_logits = true, .label_smoothing = 0.2})
                ->value(pred, targ),
            make_loss("categorical_crossentropy", {.from_logits = true})->value(pred, targ));
  // The sparse loss from probabilities on the same labels is the same number.
  HostTensor labels(DType::kI32, {4});
  for (int i = 0; i < 4; ++i) labels.data_as<int32_t>()[i] = (3 * i + 2) % 10;
  const Array y = distribute_tensor(labels, TensorLayout({"data"}, mesh_));
  expect_rel(make_loss("sparse_categorical_crossentropy")->value(pred, y), want, 1e-12,
             "sparse from probabilities");

  std::string msg = testing::ValueErrorMessage([&] {
    probs->check({4, 10}, DType::kF32, {4, 9}, DType::kF32);
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "(4, 9)"));
  EXPECT_TRUE(testing::HasSubstr(msg, "(4, 10)"));
  msg = testing::ValueErrorMessage([&] {
    probs->check({4, 10}, DType::kF32, {4, 10}, DType::kI32);
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "targets I32 (4, 10)"));
  EXPECT_NO_THROW(probs->check({4, 10}, DType::kF32, {4, 10}, DType::kF64));
  msg = testing::ValueErrorMessage([&] {
    (void)probs->value(
        pred, distribute_tensor(HostTensor(DType::kI64, shape), TensorLayout({None, None}, mesh_)));
  });
  EXPECT_TRUE(testing::HasSubstr(msg, "got I64 targets"));
}

TEST_F(LossesTest, SparseCategoricalCrossentropyLossWrapsTheVocabParallelOp) {
  const Shape shape{4, 8};
  const Array logits = distribute_tensor(to_f32(shape, random_values(shape, 5)),
                                         TensorLayout({"data", "model"}, mesh_));
  HostTensor labels(DType::kI32, {4});
  for (int i = 0; i < 4; ++i) labels.data_as<int32_t>()[i] = (3 * i + 1) % 8;
  const Array y = distribute_tensor(labels, TensorLayout({"data"}, mesh_));
  const auto loss = make_loss("sparse_categorical_crossentropy", {.from_logits = true});
  const LossResult r = loss->value_and_gradient(logits, y);
  const CrossEntropyResult want = sparse_categorical_crossentropy_with_grad(logits, y);
  EXPECT_EQ(r.value, want.loss);
  EXPECT_EQ(loss->value(logits, y), want.loss);
  EXPECT_EQ(r.gradient.gather(), want.dlogits.gather());
}

}  // namespace
}  // namespace meshlayout
