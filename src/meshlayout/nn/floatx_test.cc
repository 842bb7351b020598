// floatx (floatx.h): the process default and the per-thread scope, what layers and variables
// take from them, the refusal of a non-float type; a Dense in F64 computing in double (against
// float64 formulas, sharded) and refusing an F32 input, naming both dtypes.
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gtest/gtest.h>

#include <thread>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class FloatxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override {
    set_floatx(DType::kF32);
    reset_device_count();
  }
};

TEST_F(FloatxTest, ProcessDefaultAndThreadScope) {
  EXPECT_EQ(floatx(), DType::kF32);
  set_floatx(DType::kF64);
  EXPECT_EQ(floatx(), DType::kF64);
  {
    FloatxScope bf16(DType::kBF16);
    EXPECT_EQ(floatx(), DType::kBF16);
    {
      FloatxScope f32(DType::kF32);
      EXPECT_EQ(floatx(), DType::kF32);
    }
    EXPECT_EQ(floatx(), DType::kBF16);
    DType other = DType::kI8;
    std::thread([&] { other = floatx(); }).join();
    EXPECT_EQ(other, DType::kF64);  // a scope is this thread's; the default is everyone's
  }
  EXPECT_EQ(floatx(), DType::kF64);
  set_floatx(DType::kF32);
  EXPECT_EQ(floatx(), DType::kF32);
}

TEST_F(FloatxTest, NonFloatTypesAreRefusedByName) {
  EXPECT_TRUE(
      testing::HasSubstr(testing::ValueErrorMessage([] { set_floatx(DType::kI32); }),
                         "Unknown `floatx` value: I32. Expected one of F16, BF16, F32, F64"));
  EXPECT_TRUE(testing::HasSubstr(testing::ValueErrorMessage([] { FloatxScope s(DType::kBool); }),
                                 "Unknown `floatx` value: BOOL"));
  EXPECT_EQ(floatx(), DType::kF32);
}

TEST_F(FloatxTest, LayersTakeFloatxAtConstructionAndVariablesWithoutADtype) {
  std::shared_ptr<Dense> before = std::make_shared<Dense>(3);
  std::shared_ptr<Dense> inside;
  {
    FloatxScope f64(DType::kF64);
    inside = std::make_shared<Dense>(3);
    EXPECT_EQ(Variable(VariableSpec{.name = "v", .shape = {2}}).dtype(), DType::kF64);
    EXPECT_EQ(Variable(VariableSpec{.name = "n", .shape = {2}, .dtype = DType::kI32}).dtype(),
              DType::kI32);
    (void)(*before)(Input({4}, 2));  // built under the scope, constructed before it: F32
  }
  (void)(*inside)(Input({4}, 2));  // built after the scope, constructed inside: F64
  EXPECT_EQ(before->dtype(), DType::kF32);
  EXPECT_EQ(before->kernel()->dtype(), DType::kF32);
  EXPECT_EQ(inside->dtype(), DType::kF64);
  EXPECT_EQ(inside->kernel()->dtype(), DType::kF64);
  EXPECT_EQ(inside->bias()->dtype(), DType::kF64);
  EXPECT_EQ(Variable(VariableSpec{.name = "w", .shape = {2}}).dtype(), DType::kF32);
}

// y = silu(x·kernel + bias) in F64 on a column-parallel kernel, and its backward, against the
// float64 formulas: exact to rounding (1e-13), where F32 would be ~1e-7 off.
TEST_F(FloatxTest, DenseRunsInFloat64AndRefusesAnotherDtype) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const int64_t B = 4, K = 6, N = 8;
  std::shared_ptr<Dense> d;
  {
    FloatxScope f64(DType::kF64);
    d = std::make_shared<Dense>(N,
                                DenseOptions{.activation = Activation::kSilu,
                                             .bias_initializer = Initializer::random_normal(),
                                             .kernel_layout = TensorLayout({None, "model"}, mesh),
                                             .bias_layout = TensorLayout({"model"}, mesh)});
  }
  const std::vector<double> x = testing::random_values({B, K}, 3),
                            dyv = testing::random_values({B, N}, 4);
  HostTensor xh(DType::kF64, {B, K}), dyh(DType::kF64, {B, N});
  std::copy(x.begin(), x.end(), xh.data_as<double>());
  std::copy(dyv.begin(), dyv.end(), dyh.data_as<double>());
  const Array xa = distribute_tensor(xh, TensorLayout({"data", None}, mesh));
  const Array dy = distribute_tensor(dyh, TensorLayout({"data", "model"}, mesh));
  const Array y = d->call_on(xa);
  ASSERT_EQ(y.dtype(), DType::kF64);
  Gradients grads;
  const Array dx = d->backward(xa, dy, grads);
  ASSERT_EQ(dx.dtype(), DType::kF64);
  const std::vector<double> w = testing::gathered_f64(d->kernel()->value());
  const std::vector<double> b = testing::gathered_f64(d->bias()->value());
  const std::vector<double> got_y = testing::gathered_f64(y), got_dx = testing::gathered_f64(dx);
  const std::vector<double> got_dw = testing::gathered_f64(*grads.find(*d->kernel()));
  const std::vector<double> got_db = testing::gathered_f64(*grads.find(*d->bias()));
  std::vector<double> want_dx(static_cast<size_t>(B * K), 0.0),
      want_dw(static_cast<size_t>(K * N), 0.0), want_db(static_cast<size_t>(N), 0.0);
  double worst = 0;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double z = b[static_cast<size_t>(j)];
      for (int64_t k = 0; k < K; ++k)
        z += x[static_cast<size_t>(i * K + k)] * w[static_cast<size_t>(k * N + j)];
      const double s = 1.0 / (1.0 + std::exp(-z));
      worst = std::max(worst, std::abs(got_y[static_cast<size_t>(i * N + j)] - z * s));
      const double dz = dyv[static_cast<size_t>(i * N + j)] * s * (1.0 + z * (1.0 - s));
      want_db[static_cast<size_t>(j)] += dz;
      for (int64_t k = 0; k < K; ++k) {
        want_dx[static_cast<size_t>(i * K + k)] += dz * w[static_cast<size_t>(k * N + j)];
        want_dw[static_cast<size_t>(k * N + j)] += dz * x[static_cast<size_t>(i * K + k)];
      }
    }
  }
  for (size_t i = 0; i < want_dx.size(); ++i)
    worst = std::max(worst, std::abs(got_dx[i] - want_dx[i]));
  for (size_t i = 0; i < want_dw.size(); ++i)
    worst = std::max(worst, std::abs(got_dw[i] - want_dw[i]));
  for (size_t i = 0; i < want_db.size(); ++i)
    worst = std::max(worst, std::abs(got_db[i] - want_db[i]));
  EXPECT_LT(worst, 1e-13);

  const Array x32 = distribute_tensor(HostTensor::random(DType::kF32, {B, K}, 1),
                                      TensorLayout({"data", None}, mesh));
  EXPECT_TRUE(testing::HasSubstr(testing::ValueErrorMessage([&] { (void)d->call_on(x32); }),
                                 "computes in F64 (its weights' dtype), got an F32 input"));
  const Array dy32 = distribute_tensor(HostTensor::random(DType::kF32, {B, N}, 2),
                                       TensorLayout({"data", "model"}, mesh));
  EXPECT_TRUE(
      testing::HasSubstr(testing::ValueErrorMessage([&] { (void)d->backward(xa, dy32, grads); }),
                         "dy must be F64 of the call's output shape (4, 8), got F32 (4, 8)"));
}

}  // namespace
}  // namespace meshlayout
