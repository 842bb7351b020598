// RMSNormalization::backward and LayerNormalization::backward against float64 central
// differences of float64 references written from the formulas, with x replicated, batch-split,
// split on its last dimension (rows gathered, as the call) and 2-D, and the weights replicated
// or split; d scale / gamma / beta summed over every row into the weight's layout. Both also in
// float64 (built under FloatxScope F64) against a five-point stencil, to 1e-10, and refusing an
// F32 x or dy naming both dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/normalization/layer_normalization.h"
#include "meshlayout/nn/layers/normalization/rms_normalization.h"
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

std::vector<double> rms_reference(const Params& q, double epsilon) {
  const std::vector<double>& x = q.at("x");
  const std::vector<double>& g = q.at("scale");
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / kFeatures; ++r) {
    double ms = 0;
    for (int64_t k = 0; k < kFeatures; ++k) ms += x[r * kFeatures + k] * x[r * kFeatures + k];
    const double inv = 1.0 / std::sqrt(ms / kFeatures + epsilon);
    for (int64_t k = 0; k < kFeatures; ++k)
      y[r * kFeatures + k] = x[r * kFeatures + k] * inv * g[k];
  }
  return y;
}

std::vector<double> layer_norm_reference(const Params& q, double epsilon) {
  const std::vector<double>& x = q.at("x");
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / kFeatures; ++r) {
    const double* v = x.data() + r * kFeatures;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < kFeatures; ++k) mean += v[k] / kFeatures;
    for (int64_t k = 0; k < kFeatures; ++k) var += (v[k] - mean) * (v[k] - mean) / kFeatures;
    for (int64_t k = 0; k < kFeatures; ++k) {
      y[r * kFeatures + k] =
          (v[k] - mean) / std::sqrt(var + epsilon) * q.at("gamma")[k] + q.at("beta")[k];
    }
  }
  return y;
}

class NormalizationBackwardTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  std::vector<std::pair<TensorLayout, TensorLayout>> cases() const {  // (x, weights)
    return {{layout({kNone, kNone, kNone}), layout({kNone})},
            {layout({{"data"}, kNone, kNone}), layout({kNone})},
            {layout({{"data"}, kNone, {"model"}}), layout({{"model"}})},
            {layout({{"data"}, {"model"}, kNone}), layout({{"data"}})},
            {layout({kNone, kNone, {"data", "model"}}), layout({{"model"}})}};
  }

  // Checks dx and each weight's gradient; x (2, 3, 8) with an offset so the mean matters.
  // In F64 (the layer built in F64): y to 1e-13, gradients to 1e-10 of a five-point stencil.
  void check(Layer& layer, const TensorLayout& x_layout,
             const std::vector<std::pair<VariablePtr, std::string>>& weights,
             const std::function<std::vector<double>(const Params&)>& forward,
             DType dtype = DType::kF32) {
    const bool f64 = dtype == DType::kF64;
    const Shape shape{2, 3, kFeatures};
    std::vector<double> xv = testing::random_values(shape, 61);
    for (double& v : xv) v = static_cast<float>(v + 0.3);
    const Array x = distribute_tensor(testing::to_dtype(shape, xv, dtype), x_layout);
    const Array y = layer.call_on(x);
    EXPECT_EQ(y.dtype(), dtype);
    Params p{{"x", xv}};
    for (const auto& [v, name] : weights) p[name] = gathered_f64(v->value());
    expect_close(gathered_f64(y), forward(p), "forward y", f64 ? 1e-13 : 1e-4);
    const std::vector<double> w = testing::random_values(shape, 62);
    const Array dy = distribute_tensor(testing::to_dtype(shape, w, dtype), y.layout());
    Gradients grads;
    const Array dx = layer.backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    EXPECT_EQ(dx.dtype(), dtype);
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w, f64 ? 1e-3 : 1e-5, f64),
                 "dx", f64 ? 1e-10 : 1e-4);
    testing::expect_weight_gradients(grads, weights, forward, p, w, f64);
  }
};

TEST_F(NormalizationBackwardTest, RmsNormalization) {
  for (const auto& [x_layout, w_layout] : cases()) {
    SCOPED_TRACE("x " + x_layout.to_string() + " scale " + w_layout.to_string());
    auto norm = std::make_shared<RMSNormalization>(RMSNormalizationOptions{
        .epsilon = 1e-5,
        .scale_initializer = Initializer::random_normal({.mean = 1.0, .stddev = 0.3, .seed = 9}),
        .scale_layout = w_layout});
    norm->maybe_build({2, 3, kFeatures});
    check(*norm, x_layout, {{norm->scale(), "scale"}},
          [](const Params& q) { return rms_reference(q, 1e-5); });
  }
}

TEST_F(NormalizationBackwardTest, RmsNormalizationInFloat64) {
  for (const auto& [x_layout, w_layout] : cases()) {
    SCOPED_TRACE("x " + x_layout.to_string() + " scale " + w_layout.to_string());
    std::shared_ptr<RMSNormalization> norm;
    {
      FloatxScope f64(DType::kF64);
      norm = std::make_shared<RMSNormalization>(RMSNormalizationOptions{
          .epsilon = 1e-5,
          .scale_initializer = Initializer::random_normal({.mean = 1.0, .stddev = 0.3, .seed = 9}),
          .scale_layout = w_layout});
    }
    norm->maybe_build({2, 3, kFeatures});
    ASSERT_EQ(norm->scale()->dtype(), DType::kF64);
    check(
        *norm, x_layout, {{norm->scale(), "scale"}},
        [](const Params& q) { return rms_reference(q, 1e-5); }, DType::kF64);
  }
}

TEST_F(NormalizationBackwardTest, LayerNormalization) {
  for (const auto& [x_layout, w_layout] : cases()) {
    SCOPED_TRACE("x " + x_layout.to_string() + " gamma/beta " + w_layout.to_string());
    auto norm = std::make_shared<LayerNormalization>(LayerNormalizationOptions{
        .epsilon = 1e-3,
        .beta_initializer = Initializer::random_normal({.stddev = 0.3, .seed = 10}),
        .gamma_initializer = Initializer::random_normal({.mean = 1.0, .stddev = 0.3, .seed = 11}),
        .beta_layout = w_layout,
        .gamma_layout = w_layout});
    norm->maybe_build({2, 3, kFeatures});
    check(*norm, x_layout, {{norm->gamma(), "gamma"}, {norm->beta(), "beta"}},
          [](const Params& q) { return layer_norm_reference(q, 1e-3); });
  }
}

TEST_F(NormalizationBackwardTest, LayerNormalizationInFloat64) {
  for (const auto& [x_layout, w_layout] : cases()) {
    SCOPED_TRACE("x " + x_layout.to_string() + " gamma/beta " + w_layout.to_string());
    std::shared_ptr<LayerNormalization> norm;
    {
      FloatxScope f64(DType::kF64);
      norm = std::make_shared<LayerNormalization>(LayerNormalizationOptions{
          .epsilon = 1e-3,
          .beta_initializer = Initializer::random_normal({.stddev = 0.3, .seed = 10}),
          .gamma_initializer = Initializer::random_normal({.mean = 1.0, .stddev = 0.3, .seed = 11}),
          .beta_layout = w_layout,
          .gamma_layout = w_layout});
    }
    norm->maybe_build({2, 3, kFeatures});
    ASSERT_EQ(norm->gamma()->dtype(), DType::kF64);
    ASSERT_EQ(norm->beta()->dtype(), DType::kF64);
    check(
        *norm, x_layout, {{norm->gamma(), "gamma"}, {norm->beta(), "beta"}},
        [](const Params& q) { return layer_norm_reference(q, 1e-3); }, DType::kF64);
  }
}

// Built in F64, the backward refuses an F32 x and an F32 dy, naming both dtypes.
TEST_F(NormalizationBackwardTest, LayerNormalizationInFloat64RefusesF32) {
  std::shared_ptr<LayerNormalization> norm;
  {
    FloatxScope f64(DType::kF64);
    norm = std::make_shared<LayerNormalization>(
        LayerNormalizationOptions{.beta_layout = layout({kNone}), .gamma_layout = layout({kNone})});
  }
  norm->maybe_build({2, kFeatures});
  const Shape shape{2, kFeatures};
  const std::vector<double> v = testing::random_values(shape, 3);
  const Array x64 =
      distribute_tensor(testing::to_dtype(shape, v, DType::kF64), layout({kNone, kNone}));
  const Array x32 =
      distribute_tensor(testing::to_dtype(shape, v, DType::kF32), layout({kNone, kNone}));
  Gradients grads;
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)norm->backward(x32, x64, grads); }),
            "LayerNormalization layer 'layer_normalization' computes in F64 (its weights' dtype), "
            "got an F32 "
            "input; layers do not cast: convert the input first");
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)norm->backward(x64, x32, grads); }),
            "backward of layer 'layer_normalization': dy must be F64 of the call's output shape "
            "(2, 8), got "
            "F32 (2, 8)");
}

TEST_F(NormalizationBackwardTest, RefusesDyOfAnotherShape) {
  auto norm =
      std::make_shared<RMSNormalization>(RMSNormalizationOptions{.scale_layout = layout({kNone})});
  norm->maybe_build({2, kFeatures});
  const Array x =
      distribute_tensor(HostTensor::random(DType::kF32, {2, kFeatures}, 1), layout({kNone, kNone}));
  const Array dy =
      distribute_tensor(HostTensor::random(DType::kF32, {3, kFeatures}, 1), layout({kNone, kNone}));
  Gradients grads;
  EXPECT_THROW((void)norm->backward(x, dy, grads), ValueError);
  auto ln = std::make_shared<LayerNormalization>(
      LayerNormalizationOptions{.beta_layout = layout({kNone}), .gamma_layout = layout({kNone})});
  ln->maybe_build({2, kFeatures});
  EXPECT_THROW((void)ln->backward(x, dy, grads), ValueError);
}

}  // namespace
}  // namespace meshlayout
