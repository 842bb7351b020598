// ActivationLayer (keras.layers.Activation): Keras' automatic names, no weights, the forward of
// each activation equal to apply_activation's, and the backward against float64 central
// differences, replicated and sharded (batch over 'data', features over 'model'); inside a
// Sequential its backward is what the model's backward chains.
#include "meshlayout/nn/layers/activations/activation_layer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

class ActivationLayerTest : public NnTest {};

TEST_F(ActivationLayerTest, NamesAndNoWeights) {
  auto a = std::make_shared<ActivationLayer>(Activation::kRelu);
  auto b = std::make_shared<ActivationLayer>(Activation::kTanh);
  EXPECT_EQ(a->name(), "activation");
  EXPECT_EQ(b->name(), "activation_1");
  EXPECT_EQ(ActivationLayer(Activation::kSilu, "act").name(), "act");
  EXPECT_EQ(a->compute_output_shape({3, 5}), (Shape{3, 5}));
  HostTensor x = HostTensor::random(DType::kF32, {2, 4}, 1);
  (void)(*a)(distribute_tensor(x, TensorLayout::replicated(2, mesh_)));
  EXPECT_TRUE(a->built());
  EXPECT_TRUE(a->variables().empty());
}

TEST_F(ActivationLayerTest, ForwardAndBackwardOfEachActivation) {
  const HostTensor x = HostTensor::random(DType::kF32, {4, 8}, 3);
  const HostTensor dy = HostTensor::random(DType::kF32, {4, 8}, 4);
  for (Activation act : {Activation::kLinear, Activation::kRelu, Activation::kGelu,
                         Activation::kTanh, Activation::kSoftmax, Activation::kSilu}) {
    for (const TensorLayout& layout :
         {TensorLayout::replicated(2, mesh_), TensorLayout({"data", "model"}, mesh_)}) {
      ActivationLayer layer(act);
      const Array xa = distribute_tensor(x, layout);
      const HostTensor y = layer(Tensor(distribute_tensor(x, layout))).value().gather();
      EXPECT_EQ(y, apply_activation(act, xa).gather());
      Gradients grads;
      const Array dx = layer.backward(xa, distribute_tensor(dy, layout), grads);
      EXPECT_EQ(dx.layout(), layout);
      const HostTensor got = dx.gather();
      // d/dx_k of Σ dy · act(x), by central differences in float64 on the float32 op
      for (int64_t k : {0, 5, 13, 31}) {
        HostTensor plus = x, minus = x;
        const float h = 1e-2f;
        plus.data_as<float>()[k] += h;
        minus.data_as<float>()[k] -= h;
        const HostTensor yp = apply_activation(act, distribute_tensor(plus, layout)).gather();
        const HostTensor ym = apply_activation(act, distribute_tensor(minus, layout)).gather();
        double numeric = 0;
        for (int64_t i = 0; i < yp.num_elements(); ++i) {
          numeric += static_cast<double>(dy.data_as<float>()[i]) *
                     (static_cast<double>(yp.data_as<float>()[i]) - ym.data_as<float>()[i]) /
                     (2.0 * h);
        }
        if (act == Activation::kRelu && std::abs(x.data_as<float>()[k]) < h) continue;
        EXPECT_NEAR(got.data_as<float>()[k], numeric, 2e-3 * (1 + std::abs(numeric)))
            << static_cast<int>(act) << " " << layout.to_string() << " k=" << k;
      }
    }
  }
}

TEST_F(ActivationLayerTest, ChainsInASequentialBackward) {
  auto dense = std::make_shared<Dense>(4, DenseOptions{.name = "d"});
  auto act = std::make_shared<ActivationLayer>(Activation::kTanh);
  auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{dense, act},
                                            SequentialOptions{.input_shape = Shape{3}});
  const HostTensor x = HostTensor::random(DType::kF32, {2, 3}, 5);
  // the weights of a model built outside any scope sit on one device; x goes there too
  const Array xa = distribute_tensor(
      x, TensorLayout::replicated(2, *dense->kernel()->value().layout().device_mesh()));
  const Tensor y = (*model)(Tensor(distribute_tensor(xa, xa.layout())));
  const HostTensor dy = HostTensor::random(DType::kF32, {2, 4}, 6);
  Gradients grads;
  const Array dx = model->backward(xa, distribute_tensor(dy, y.value().layout()), grads);
  // dL/dz = dy · (1 − tanh²(z)); dx = dL/dz · kernelᵀ
  const HostTensor z = dense->call_on(xa).gather();
  const HostTensor k = dense->kernel()->value().gather();
  const HostTensor got = dx.gather();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 3; ++i) {
      double want = 0;
      for (int64_t j = 0; j < 4; ++j) {
        const double t = std::tanh(static_cast<double>(z.data_as<float>()[b * 4 + j]));
        want += dy.data_as<float>()[b * 4 + j] * (1 - t * t) * k.data_as<float>()[i * 4 + j];
      }
      EXPECT_NEAR(got.data_as<float>()[b * 3 + i], want, 1e-5);
    }
  }
}

}  // namespace
}  // namespace meshlayout
