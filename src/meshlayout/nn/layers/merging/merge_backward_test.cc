// The backward of the weightless layers — Add, Multiply, Concatenate (backward_inputs, inputs
// in different layouts), Dropout (the forward's own mask), Reshape and Flatten — and of a
// functional model with a residual Add, against float64 central differences of float64
// references; each dx in its input's layout.
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/merging/merge.h"
#include "meshlayout/nn/layers/regularization/dropout.h"
#include "meshlayout/nn/layers/reshaping/reshape.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::Forward;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;

class MergeBackwardTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  // Runs layer->backward_inputs on three inputs (4, 6), (4, 6 or 3), (4, 6) in three layouts.
  void check(MergeLayer& layer, const std::vector<Shape>& shapes, const Forward& forward) {
    const std::vector<TensorLayout> layouts{layout({{"data"}, kNone}), layout({kNone, {"model"}}),
                                            layout({{"model"}, {"data"}})};
    Params p;
    std::vector<Array> xs;
    std::vector<const Array*> ptrs;
    std::vector<Tensor> tensors;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::string name = "x" + std::to_string(i);
      p[name] = testing::random_values(shapes[i], 70 + i);
      xs.push_back(distribute_tensor(testing::to_f32(shapes[i], p[name]), layouts[i]));
    }
    for (const Array& x : xs) {
      ptrs.push_back(&x);
      tensors.emplace_back(distribute_tensor(x, x.layout()));
    }
    const Tensor y = layer.apply(tensors);
    expect_close(gathered_f64(y.value()), forward(p), "forward y");
    const std::vector<double> w = testing::random_values(y.shape(), 79);
    const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
    Gradients grads;
    const std::vector<Array> dx = layer.backward_inputs(ptrs, dy, grads);
    ASSERT_EQ(dx.size(), xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(dx[i].layout(), xs[i].layout()) << i;
      expect_close(gathered_f64(dx[i]), numeric_gradient(forward, p, "x" + std::to_string(i), w),
                   "dx" + std::to_string(i));
    }
    EXPECT_EQ(grads.size(), 0u);
  }
};

TEST_F(MergeBackwardTest, AddMultiplyConcatenate) {
  Add add;
  check(add, {{4, 6}, {4, 6}, {4, 6}}, [](const Params& q) {
    std::vector<double> y = q.at("x0");
    for (size_t i = 0; i < y.size(); ++i) y[i] += q.at("x1")[i] + q.at("x2")[i];
    return y;
  });
  Multiply mul;
  check(mul, {{4, 6}, {4, 6}, {4, 6}}, [](const Params& q) {
    std::vector<double> y = q.at("x0");
    for (size_t i = 0; i < y.size(); ++i) y[i] *= q.at("x1")[i] * q.at("x2")[i];
    return y;
  });
  Concatenate cat(-1);
  check(cat, {{4, 6}, {4, 3}, {4, 6}}, [](const Params& q) {
    std::vector<double> y;
    for (int64_t r = 0; r < 4; ++r) {
      for (const auto& [name, cols] :
           {std::pair{"x0", 6}, std::pair{"x1", 3}, std::pair{"x2", 6}}) {
        for (int64_t c = 0; c < cols; ++c)
          y.push_back(q.at(name)[static_cast<size_t>(r * cols + c)]);
      }
    }
    return y;
  });
  Concatenate rows(0);
  check(rows, {{4, 6}, {2, 6}, {4, 6}}, [](const Params& q) {
    std::vector<double> y = q.at("x0");
    y.insert(y.end(), q.at("x1").begin(), q.at("x1").end());
    y.insert(y.end(), q.at("x2").begin(), q.at("x2").end());
    return y;
  });
}

TEST_F(MergeBackwardTest, MergeRefusesDyOfAnotherShape) {
  Add add;
  const Array a =
      distribute_tensor(HostTensor::random(DType::kF32, {4, 6}, 1), layout({kNone, kNone}));
  const Array bad =
      distribute_tensor(HostTensor::random(DType::kF32, {4, 5}, 1), layout({kNone, kNone}));
  const Array* ins[] = {&a, &a};
  Gradients grads;
  EXPECT_THROW((void)add.backward_inputs(ins, bad, grads), ValueError);
}

TEST_F(MergeBackwardTest, LayersOfOneInputRefuseSeveral) {
  auto dense = std::make_shared<Dense>(3, DenseOptions{.name = "lone",
                                                       .kernel_layout = layout({kNone, kNone}),
                                                       .bias_layout = layout({kNone})});
  const Array a =
      distribute_tensor(HostTensor::random(DType::kF32, {4, 6}, 1), layout({kNone, kNone}));
  const Array* ins[] = {&a, &a};
  Gradients grads;
  try {
    (void)dense->backward_inputs(ins, a, grads);
    FAIL() << "no error";
  } catch (const FailedPreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("'lone'"), std::string::npos) << e.what();
  }
}

TEST_F(MergeBackwardTest, DropoutReusesTheForwardMask) {
  auto drop = std::make_shared<Dropout>(0.4, DropoutOptions{.seed = 5});
  const Shape shape{4, 10};
  const std::vector<double> xv = testing::random_values(shape, 81);
  const Array x = distribute_tensor(testing::to_f32(shape, xv), layout({{"data"}, {"model"}}));
  const std::vector<double> w = testing::random_values(shape, 82);
  const Array dy = distribute_tensor(testing::to_f32(shape, w), layout({kNone, {"model"}}));
  Gradients grads;
  // Inference: the identity.
  expect_close(gathered_f64(drop->backward(x, dy, grads)), w, "inference dx");
  drop->set_training(true);
  EXPECT_THROW((void)drop->backward(x, dy, grads), FailedPreconditionError);  // no mask yet
  for (int step = 0; step < 2; ++step) {  // each backward follows its own call's mask
    const std::vector<double> y =
        gathered_f64((*drop)(Tensor(distribute_tensor(x, x.layout()))).value());
    // y = x·m/(1-rate): dL/dx = w·m/(1-rate) = w·y/x.
    std::vector<double> want(y.size());
    int dropped = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      want[i] = w[i] * y[i] / xv[i];
      dropped += y[i] == 0;
    }
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, static_cast<int>(y.size()));
    const Array dx = drop->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), want, "training dx");
    expect_close(gathered_f64(drop->recompute(x)), y, "recompute");  // no new draw
  }
}

TEST_F(MergeBackwardTest, ReshapeAndFlatten) {
  const Shape shape{4, 2, 6};
  const std::vector<double> xv = testing::random_values(shape, 91);
  const Array x =
      distribute_tensor(testing::to_f32(shape, xv), layout({{"data"}, kNone, {"model"}}));
  const std::vector<double> w = testing::random_values({4, 12}, 92);
  auto identity = [](const Params& q) { return q.at("x"); };
  for (std::shared_ptr<Layer> layer : std::vector<std::shared_ptr<Layer>>{
           std::make_shared<Flatten>(), std::make_shared<Reshape>(Shape{3, 4})}) {
    const Tensor y = (*layer)(Tensor(distribute_tensor(x, x.layout())));
    const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
    Gradients grads;
    const Array dx = layer->backward(x, dy, grads);
    EXPECT_EQ(dx.shape(), shape);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), numeric_gradient(identity, {{"x", xv}}, "x", w), "dx");
  }
}

TEST_F(MergeBackwardTest, FunctionalResidualModel) {
  // x → Dense(6, tanh) → Add(x, h) → Dense(3): x's gradient comes from both paths.
  LayoutMap rules(mesh_);
  rules["d1.kernel"] = {None, "model"};
  rules["d2.kernel"] = {"model", None};
  std::shared_ptr<Model> model;
  std::shared_ptr<Dense> d1, d2;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({6}, 4);
    d1 = std::make_shared<Dense>(
        6,
        DenseOptions{.name = "d1",
                     .activation = Activation::kTanh,
                     .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 1}),
                     .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 2})});
    d2 = std::make_shared<Dense>(
        3,
        DenseOptions{.name = "d2",
                     .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 3}),
                     .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 4})});
    Tensor h = (*d1)(in);
    Tensor r = std::make_shared<Add>()->apply({in, h});
    model = Model::functional(in, (*d2)(r));
  }
  const std::vector<double> xv = testing::random_values({4, 6}, 95);
  const Array x = distribute_tensor(testing::to_f32({4, 6}, xv), layout({{"data"}, kNone}));
  const Tensor y = (*model)(Tensor(distribute_tensor(x, x.layout())));
  const std::vector<double> w = testing::random_values(y.shape(), 96);
  const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
  Params p{{"x", xv},
           {"k1", gathered_f64(d1->kernel()->value())},
           {"b1", gathered_f64(d1->bias()->value())},
           {"k2", gathered_f64(d2->kernel()->value())},
           {"b2", gathered_f64(d2->bias()->value())}};
  auto forward = [](const Params& q) {
    std::vector<double> r(24), y(12);
    for (int64_t b = 0; b < 4; ++b) {
      for (int64_t o = 0; o < 6; ++o) {
        double s = q.at("b1")[o];
        for (int64_t i = 0; i < 6; ++i) s += q.at("x")[b * 6 + i] * q.at("k1")[i * 6 + o];
        r[b * 6 + o] = q.at("x")[b * 6 + o] + std::tanh(s);
      }
      for (int64_t o = 0; o < 3; ++o) {
        double s = q.at("b2")[o];
        for (int64_t i = 0; i < 6; ++i) s += r[b * 6 + i] * q.at("k2")[i * 3 + o];
        y[b * 3 + o] = s;
      }
    }
    return y;
  };
  expect_close(gathered_f64(y.value()), forward(p), "forward y");
  Gradients grads;
  const Array dx = model->backward(x, dy, grads);
  EXPECT_EQ(dx.layout(), x.layout());
  expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
  const std::vector<std::pair<VariablePtr, std::string>> vars{
      {d1->kernel(), "k1"}, {d1->bias(), "b1"}, {d2->kernel(), "k2"}, {d2->bias(), "b2"}};
  testing::expect_weight_gradients(grads, vars, forward, p, w);
  std::printf("max relative gradient error so far: %.3g\n", testing::max_relative_error_seen());
}

}  // namespace
}  // namespace meshlayout
