#include "meshlayout/nn/layers/normalization/batch_normalization.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/convolutional/conv2d.h"
#include "meshlayout/nn/layers/core/embedding.h"
#include "meshlayout/nn/layers/normalization/layer_normalization.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class BatchNormalizationTest : public NnTest {};

std::vector<std::string> paths(const std::vector<VariablePtr>& vars, bool object) {
  std::vector<std::string> out;
  for (const VariablePtr& v : vars) out.push_back(object ? v->object_path() : v->path());
  return out;
}

TEST_F(BatchNormalizationTest, KerasPathsAndOrder) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  std::shared_ptr<Model> f;
  {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({8}, 4);
    f = Model::functional(in, (*std::make_shared<BatchNormalization>())(in));
  }
  EXPECT_THAT(
      paths(f->variables(), false),
      ElementsAre("batch_normalization/gamma", "batch_normalization/beta",
                  "batch_normalization/moving_mean", "batch_normalization/moving_variance"));
  EXPECT_THAT(
      paths(f->variables(), true),
      ElementsAre("batch_normalization.gamma", "batch_normalization.beta",
                  "batch_normalization.moving_mean", "batch_normalization.moving_variance"));
  EXPECT_FALSE(f->variables()[2]->trainable());
}

// Inference on several layouts of the input and the weights; float64 reference.
TEST_F(BatchNormalizationTest, InferenceMatchesAFloat64ReferenceOnSeveralLayouts) {
  const std::vector<std::pair<TensorLayout, std::optional<TensorLayout>>> cases = {
      {TensorLayout({"data", None}, mesh_), std::nullopt},
      {TensorLayout({None, "model"}, mesh_), TensorLayout({"model"})},
      {TensorLayout({"data", "model"}, mesh_), TensorLayout({"data"})},
      {TensorLayout({None, None}, mesh_), TensorLayout({"model"})},
      {TensorLayout({"model", "data"}, mesh_), std::nullopt},
  };
  HostTensor x = HostTensor::random(DType::kF32, {8, 12}, 3);
  for (const auto& [input_layout, weight_layout] : cases) {
    LayoutMap map(mesh_);
    if (weight_layout) map["batch_normalization.*"] = *weight_layout;
    std::shared_ptr<Model> f;
    std::shared_ptr<BatchNormalization> bn;
    {
      LayoutMapScope scope = map.scope();
      clear_session();
      Tensor in = Input({12}, 8);
      bn = std::make_shared<BatchNormalization>(BatchNormalizationOptions{.epsilon = 1e-2});
      f = Model::functional(in, (*bn)(in));
    }
    HostTensor g = HostTensor::random(DType::kF32, {12}, 4),
               b = HostTensor::random(DType::kF32, {12}, 5);
    HostTensor m = HostTensor::random(DType::kF32, {12}, 6),
               v = HostTensor::random(DType::kF32, {12}, 7);
    for (int64_t i = 0; i < 12; ++i) v.data_as<float>()[i] = std::abs(v.data_as<float>()[i]) + 0.5f;
    bn->gamma()->assign(g);
    bn->beta()->assign(b);
    bn->moving_mean()->assign(m);
    bn->moving_variance()->assign(v);
    Tensor y = (*f)(distribute_tensor(x, input_layout));
    EXPECT_EQ(y.value().layout(), input_layout);  // element-wise: the data keep their layout
    HostTensor got = y.value().gather();
    for (int64_t r = 0; r < 8; ++r) {
      for (int64_t c = 0; c < 12; ++c) {
        const double want = (x.data_as<float>()[r * 12 + c] - double{m.data_as<float>()[c]}) /
                                std::sqrt(double{v.data_as<float>()[c]} + 1e-2) *
                                g.data_as<float>()[c] +
                            b.data_as<float>()[c];
        EXPECT_NEAR(got.data_as<float>()[r * 12 + c], want, 1e-5 * std::max(1.0, std::abs(want)))
            << input_layout.to_string();
      }
    }
  }
}

TEST_F(BatchNormalizationTest, TrainingModeAndBadOptions) {
  BatchNormalization bn;
  EXPECT_FALSE(
      bn.training());  // inference by default; training: batch_normalization_backward_test.cc
  bn.set_training(true);
  EXPECT_TRUE(bn.training());
  bn.set_training(false);
  EXPECT_THROW(BatchNormalization(BatchNormalizationOptions{.epsilon = 0}), ValueError);
  EXPECT_THROW(BatchNormalization(BatchNormalizationOptions{.momentum = 1.5}), ValueError);
}

// An F32 layer refuses an F64 input naming both dtypes; a layer built under floatx BF16 is
// refused at build (it would read BF16 weights as floats). F64: batch_normalization_backward_test.
TEST_F(BatchNormalizationTest, RefusesAnotherInputDtypeAndBf16Weights) {
  auto bn = std::make_shared<BatchNormalization>();
  bn->maybe_build({2, 3});
  EXPECT_EQ(testing::ValueErrorMessage([&] {
              (void)bn->call_on(distribute_tensor(HostTensor(DType::kF64, {2, 3}),
                                                  TensorLayout({None, None}, mesh_)));
            }),
            "BatchNormalization layer 'batch_normalization' computes in F32 (its weights' dtype), "
            "got an F64 "
            "input; layers do not cast: convert the input first");
  std::shared_ptr<BatchNormalization> half;
  {
    FloatxScope bf16(DType::kBF16);
    half = std::make_shared<BatchNormalization>();
  }
  EXPECT_EQ(testing::ValueErrorMessage([&] {
              half->maybe_build({2, 3});
            }),
            "BatchNormalization layer 'batch_normalization_1' has BF16 weights (its dtype); it "
            "computes in F32 "
            "or F64 only: build it under floatx F32 or F64");
}

// Keras 2 DTensor per-layer layout options: explicit, they win over the map's rules.
TEST_F(BatchNormalizationTest, PerLayerLayoutOptionsWinOverRules) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map[".*kernel"] = TensorLayout({None, None});  // rank 2: would not even fit the conv kernel
  map["ln.*"] = {None};
  std::shared_ptr<Model> f;
  std::shared_ptr<Dense> d;
  std::shared_ptr<Conv2D> conv;
  std::shared_ptr<Embedding> emb;
  std::shared_ptr<LayerNormalization> ln;
  std::shared_ptr<BatchNormalization> bn;
  {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({4, 4, 2}, 2);
    conv = std::make_shared<Conv2D>(
        8, Conv2DOptions{.kernel_size = {1, 1},
                         .kernel_layout = TensorLayout({None, None, None, "model"}),
                         .bias_layout = TensorLayout({"model"})});
    d = std::make_shared<Dense>(8, DenseOptions{.kernel_layout = TensorLayout({"model", "data"}),
                                                .bias_layout = TensorLayout({"data"})});
    ln = std::make_shared<LayerNormalization>(
        LayerNormalizationOptions{.name = "ln",
                                  .beta_layout = TensorLayout({"model"}),
                                  .gamma_layout = TensorLayout({"data"})});
    bn = std::make_shared<BatchNormalization>(BatchNormalizationOptions{
        .gamma_layout = TensorLayout({"model"}), .moving_variance_layout = TensorLayout({"data"})});
    f = Model::functional(in, (*bn)((*ln)((*d)((*conv)(in)))));
  }
  EXPECT_EQ(conv->kernel()->layout(), TensorLayout({None, None, None, "model"}, mesh_));
  EXPECT_EQ(conv->bias()->layout(), TensorLayout({"model"}, mesh_));
  EXPECT_EQ(d->kernel()->layout(), TensorLayout({"model", "data"}, mesh_));
  EXPECT_EQ(d->bias()->layout(), TensorLayout({"data"}, mesh_));
  EXPECT_EQ(ln->beta()->layout(), TensorLayout({"model"}, mesh_));
  EXPECT_EQ(ln->gamma()->layout(), TensorLayout({"data"}, mesh_));
  EXPECT_EQ(bn->gamma()->layout(), TensorLayout({"model"}, mesh_));
  EXPECT_EQ(bn->moving_variance()->layout(), TensorLayout({"data"}, mesh_));
  EXPECT_EQ(bn->beta()->layout(), TensorLayout({None}, mesh_));  // no option, no rank-1 rule
  {
    clear_session();
    LayoutMapScope scope = map.scope();
    Tensor ids = Input({3}, 2);
    emb = std::make_shared<Embedding>(
        16, 8, EmbeddingOptions{.embeddings_layout = TensorLayout({"model", None})});
    f = Model::functional(ids, (*emb)(ids));
  }
  EXPECT_EQ(emb->embeddings()->layout(), TensorLayout({"model", None}, mesh_));
}

TEST_F(BatchNormalizationTest, LayoutOptionOfTheWrongRankNamesTheVariableBeforeAnyAllocation) {
  auto rt = default_runtime();
  LayoutMap map(mesh_);
  std::vector<int64_t> before;
  for (VirtualDevice* dev : rt->local_devices())
    before.push_back(dev->memory().stats().allocations);
  try {
    LayoutMapScope scope = map.scope();
    Tensor in = Input({4}, 2);
    Tensor h = (*std::make_shared<Dense>(8, DenseOptions{.name = "d1"}))(in);
    Model::functional(
        in, (*std::make_shared<Dense>(
                8, DenseOptions{.name = "d2", .kernel_layout = TensorLayout({"model"})}))(h));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("variable 'd2.kernel' with shape (8, 8) does not fit"));
    EXPECT_THAT(e.what(), HasSubstr("the layout has 1 dimension, the tensor has 2"));
  }
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(rt->local_devices()[i]->memory().stats().allocations, before[i]);
  }
}

}  // namespace
}  // namespace meshlayout
