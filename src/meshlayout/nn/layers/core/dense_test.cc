// Dense (its backward through its forward), apply_activation_backward and Sequential's backward
// against float64 central differences of float64 references written from the formulas
// (y = act(x·K + b)), under replicated, batch-split, column-parallel, row-parallel and 2-D
// layouts on the 2x4 mesh; every gradient in its variable's layout, dx in x's.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;

double activate(Activation a, double z) {
  switch (a) {
    case Activation::kRelu:
      return z > 0 ? z : 0;
    case Activation::kGelu:
      return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
    case Activation::kTanh:
      return std::tanh(z);
    case Activation::kSilu:
      return z / (1.0 + std::exp(-z));
    default:
      return z;
  }
}

// act over rows of `cols` (softmax row-wise).
std::vector<double> activate_rows(Activation a, std::vector<double> z, int64_t cols) {
  if (a != Activation::kSoftmax) {
    for (double& v : z) v = activate(a, v);
    return z;
  }
  for (size_t r = 0; r < z.size() / static_cast<size_t>(cols); ++r) {
    double* v = z.data() + r * static_cast<size_t>(cols);
    double sum = 0;
    for (int64_t k = 0; k < cols; ++k) sum += std::exp(v[k]);
    for (int64_t k = 0; k < cols; ++k) v[k] = std::exp(v[k]) / sum;
  }
  return z;
}

// act(x (rows, in) · K (in, out) + b).
std::vector<double> dense_reference(const std::vector<double>& x, const std::vector<double>& k,
                                    const std::vector<double>* b, int64_t in, int64_t out,
                                    Activation a) {
  const int64_t rows = static_cast<int64_t>(x.size()) / in;
  std::vector<double> z(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * k[i * out + o];
      z[r * out + o] = s;
    }
  }
  return activate_rows(a, std::move(z), out);
}

class LayerBackwardTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  void check_dense(Activation act, const TensorLayout& x_layout, const TensorLayout& kernel_layout,
                   const TensorLayout& bias_layout) {
    SCOPED_TRACE("x " + x_layout.to_string() + " kernel " + kernel_layout.to_string() + " bias " +
                 bias_layout.to_string());
    const Shape x_shape{2, 3, 6};
    const int64_t units = 8;
    auto dense = std::make_shared<Dense>(
        units,
        DenseOptions{.activation = act,
                     .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 7}),
                     .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 8}),
                     .kernel_layout = kernel_layout,
                     .bias_layout = bias_layout});
    const std::vector<double> xv = testing::random_values(x_shape, 21);
    const Array x = distribute_tensor(testing::to_f32(x_shape, xv), x_layout);
    const Tensor y = (*dense)(Tensor(distribute_tensor(x, x.layout())));
    const std::vector<double> w = testing::random_values(y.shape(), 22);
    const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
    Params p{{"x", xv},
             {"kernel", gathered_f64(dense->kernel()->value())},
             {"bias", gathered_f64(dense->bias()->value())}};
    auto forward = [&](const Params& q) {
      return dense_reference(q.at("x"), q.at("kernel"), &q.at("bias"), 6, units, act);
    };
    expect_close(gathered_f64(y.value()), forward(p), "forward y");
    Gradients grads;
    const Array dx = dense->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
    testing::expect_weight_gradients(grads, {{dense->kernel(), "kernel"}, {dense->bias(), "bias"}},
                                     forward, p, w);
  }
};

TEST_F(LayerBackwardTest, DenseUnderEveryLayout) {
  for (Activation act : {Activation::kLinear, Activation::kGelu}) {
    SCOPED_TRACE(static_cast<int>(act));
    check_dense(act, layout({kNone, kNone, kNone}), layout({kNone, kNone}), layout({kNone}));
    check_dense(act, layout({{"data"}, kNone, kNone}), layout({kNone, kNone}), layout({kNone}));
    // Column-parallel (Megatron's first Dense): dx partial sums over 'model'.
    check_dense(act, layout({{"data"}, kNone, kNone}), layout({kNone, {"model"}}),
                layout({{"model"}}));
    // Row-parallel: x split on its features like the kernel's rows.
    check_dense(act, layout({{"data"}, kNone, {"model"}}), layout({{"model"}, kNone}),
                layout({kNone}));
    // 2-D: kernel on both axes, x's batch over 'model'.
    check_dense(act, layout({{"model"}, kNone, kNone}), layout({{"data"}, {"model"}}),
                layout({{"data"}}));
  }
}

TEST_F(LayerBackwardTest, DenseReluTanhSiluSoftmax) {
  for (Activation act :
       {Activation::kRelu, Activation::kTanh, Activation::kSilu, Activation::kSoftmax}) {
    SCOPED_TRACE(static_cast<int>(act));
    check_dense(act, layout({{"data"}, kNone, kNone}), layout({kNone, {"model"}}),
                layout({{"model"}}));
  }
}

TEST_F(LayerBackwardTest, ActivationBackwardInEveryLayout) {
  const Shape shape{4, 8};
  const std::vector<double> zv = testing::random_values(shape, 31, 2.0);
  const std::vector<double> w = testing::random_values(shape, 32);
  for (Activation act : {Activation::kLinear, Activation::kRelu, Activation::kGelu,
                         Activation::kTanh, Activation::kSoftmax, Activation::kSilu}) {
    for (const TensorLayout& l : {layout({kNone, kNone}), layout({{"data"}, {"model"}}),
                                  layout({kNone, {"data", "model"}})}) {
      SCOPED_TRACE(fmt::format("activation {} layout {}", static_cast<int>(act), l.to_string()));
      const Array z = distribute_tensor(testing::to_f32(shape, zv), l);
      // dy in another layout than z: brought to z's.
      const Array dy = distribute_tensor(testing::to_f32(shape, w), layout({{"model"}, kNone}));
      const Array dz = apply_activation_backward(act, z, dy);
      EXPECT_EQ(dz.layout(), z.layout());
      auto forward = [&](const Params& q) { return activate_rows(act, q.at("z"), shape[1]); };
      expect_close(gathered_f64(dz), numeric_gradient(forward, {{"z", zv}}, "z", w), "dz");
    }
  }
  const Array z = distribute_tensor(testing::to_f32(shape, zv), layout({kNone, kNone}));
  const Array bad =
      distribute_tensor(HostTensor::random(DType::kF32, {4, 7}, 1), layout({kNone, kNone}));
  EXPECT_THROW((void)apply_activation_backward(Activation::kRelu, z, bad), ValueError);
}

TEST_F(LayerBackwardTest, DenseRefusesDyOfTheWrongShape) {
  auto dense = std::make_shared<Dense>(
      8, DenseOptions{.kernel_layout = layout({kNone, kNone}), .bias_layout = layout({kNone})});
  const Array x =
      distribute_tensor(HostTensor::random(DType::kF32, {2, 6}, 1), layout({kNone, kNone}));
  (void)(*dense)(Tensor(distribute_tensor(x, x.layout())));
  const Array dy =
      distribute_tensor(HostTensor::random(DType::kF32, {2, 7}, 2), layout({kNone, kNone}));
  Gradients grads;
  try {
    (void)dense->backward(x, dy, grads);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(2, 8)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(2, 7)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(grads.size(), 0u);
}

TEST_F(LayerBackwardTest, SequentialDenseReluDenseFromOneCall) {
  // Megatron MLP: column-parallel then row-parallel, batch over 'data'.
  auto d1 = std::make_shared<Dense>(
      8, DenseOptions{.activation = Activation::kRelu,
                      .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 1}),
                      .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 2}),
                      .kernel_layout = layout({kNone, {"model"}}),
                      .bias_layout = layout({{"model"}})});
  auto d2 = std::make_shared<Dense>(
      5, DenseOptions{.kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 3}),
                      .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 4}),
                      .kernel_layout = layout({{"model"}, kNone}),
                      .bias_layout = layout({kNone})});
  auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{d1, d2});
  const Shape x_shape{4, 6};
  const std::vector<double> xv = testing::random_values(x_shape, 41);
  const Array x = distribute_tensor(testing::to_f32(x_shape, xv), layout({{"data"}, kNone}));
  const Tensor y = (*model)(Tensor(distribute_tensor(x, x.layout())));
  const std::vector<double> w = testing::random_values(y.shape(), 42);
  const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
  Params p{{"x", xv},
           {"k1", gathered_f64(d1->kernel()->value())},
           {"b1", gathered_f64(d1->bias()->value())},
           {"k2", gathered_f64(d2->kernel()->value())},
           {"b2", gathered_f64(d2->bias()->value())}};
  auto forward = [&](const Params& q) {
    const std::vector<double> h =
        dense_reference(q.at("x"), q.at("k1"), &q.at("b1"), 6, 8, Activation::kRelu);
    return dense_reference(h, q.at("k2"), &q.at("b2"), 8, 5, Activation::kLinear);
  };
  expect_close(gathered_f64(y.value()), forward(p), "forward y");
  Gradients grads;
  const Array dx = model->backward(x, dy, grads);
  EXPECT_EQ(dx.layout(), x.layout());
  expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
  EXPECT_EQ(grads.size(), 4u);
  const std::vector<std::pair<VariablePtr, std::string>> vars{
      {d1->kernel(), "k1"}, {d1->bias(), "b1"}, {d2->kernel(), "k2"}, {d2->bias(), "b2"}};
  testing::expect_weight_gradients(grads, vars, forward, p, w);
  std::printf("max relative gradient error so far: %.3g\n", testing::max_relative_error_seen());
}

}  // namespace
}  // namespace meshlayout
