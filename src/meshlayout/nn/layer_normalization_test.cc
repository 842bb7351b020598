#include "meshlayout/nn/layer_normalization.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

class LayerNormalizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
};

class LnModel : public Model {
 public:
  explicit LnModel(LayerNormalizationOptions options = {}) : Model("ln_model") {
    ln = track("ln", std::make_shared<LayerNormalization>(std::move(options)));
  }
  Tensor call(const Tensor& x) override { return (*ln)(x); }
  std::shared_ptr<LayerNormalization> ln;
};

// Float64 reference: (x - mean) / sqrt(var + eps) * gamma + beta over the last axis.
std::vector<double> reference(const HostTensor& x, const HostTensor* gamma, const HostTensor* beta,
                              double epsilon) {
  const int64_t row = x.shape().back();
  std::vector<double> y(static_cast<size_t>(x.num_elements()));
  for (int64_t r = 0; r < x.num_elements() / row; ++r) {
    const float* v = x.data_as<float>() + r * row;
    double mean = 0, var = 0;
    for (int64_t k = 0; k < row; ++k) mean += v[k];
    mean /= static_cast<double>(row);
    for (int64_t k = 0; k < row; ++k) var += (v[k] - mean) * (v[k] - mean);
    var /= static_cast<double>(row);
    for (int64_t k = 0; k < row; ++k) {
      double out = (v[k] - mean) / std::sqrt(var + epsilon);
      if (gamma) out *= gamma->data_as<float>()[k];
      if (beta) out += beta->data_as<float>()[k];
      y[static_cast<size_t>(r * row + k)] = out;
    }
  }
  return y;
}

HostTensor scaled_input(const Shape& shape, uint64_t seed) {
  HostTensor x = HostTensor::random(DType::kF32, shape, seed);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = x.data_as<float>()[i] * 3.0f + 1.0f;
  return x;
}

struct Case {
  const char* mesh;
  Shape shape;
  TensorLayout input;
  TensorLayout gamma;  // rank 0: no rule (replicated)
  TensorLayout want_output;
};

TEST_F(LayerNormalizationTest, ShardedInputsMatchAFloat64Reference) {
  const std::vector<Case> cases = {
      {"mesh[data=2,model=4]", {8, 12}, {"data", None}, {"model"}, {"data", None}},
      // last dimension split: gathered first, the output keeps that layout
      {"mesh[data=2,model=4]", {8, 10}, {"data", "model"}, {"model"}, {"data", None}},
      {"mesh[data=2,model=4]", {3, 5, 10}, {"data", "model", None}, TensorLayout::replicated(0),
       {"data", "model", None}},
      {"mesh[data=2,model=4]", {6, 10}, {None, {"data", "model"}}, {"data"}, {None, None}},
      {"mesh[x=8]", {3, 5, 10}, {None, "x", None}, {"x"}, {None, "x", None}},
      {"mesh[x=8]", {5, 7}, {"x", None}, TensorLayout::replicated(0), {"x", None}},
      {"mesh[x=8]", {4, 9}, {None, "x"}, TensorLayout::replicated(0), {None, None}},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << n++ << " " << c.mesh << " " << c.input);
    clear_session();
    const DeviceMesh mesh = DeviceMesh::from_string(c.mesh);
    LayoutMap rules(mesh);
    if (c.gamma.rank() == 1) {
      rules["ln.gamma"] = c.gamma;
      rules["ln.beta"] = c.gamma;
    }
    std::shared_ptr<LnModel> model;
    {
      LayoutMapScope scope = rules.scope();
      model = std::make_shared<LnModel>(LayerNormalizationOptions{
          .beta_initializer = Initializer::random_uniform({.minval = -1, .maxval = 1}),
          .gamma_initializer = Initializer::random_normal({.mean = 1, .stddev = 0.5})});
    }
    const HostTensor x = scaled_input(c.shape, static_cast<uint64_t>(n));
    Tensor y = (*model)(distribute_tensor(x, c.input.with_device_mesh(mesh)));
    EXPECT_EQ(y.value().layout(), c.want_output.with_device_mesh(mesh));
    const HostTensor gamma = model->ln->gamma()->value().gather();
    const HostTensor beta = model->ln->beta()->value().gather();
    const std::vector<double> want = reference(x, &gamma, &beta, 1e-3);
    const HostTensor got = y.value().gather();
    ASSERT_EQ(got.shape(), c.shape);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got.data_as<float>()[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << i;
    }
  }
}

TEST_F(LayerNormalizationTest, DefaultsAndOptionsFollowKeras) {
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  LayoutMap rules(mesh);
  rules["ln.gamma"] = {"model"};
  std::shared_ptr<LnModel> model;
  {
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<LnModel>();
  }
  const HostTensor x = scaled_input({4, 8}, 7);
  HostTensor got = (*model)(distribute_tensor(x, TensorLayout({"data", "model"}, mesh))).value().gather();
  EXPECT_EQ(model->ln->name(), "layer_normalization");
  EXPECT_EQ(model->ln->options().epsilon, 1e-3);
  EXPECT_EQ(model->ln->gamma()->object_path(), "ln.gamma");
  EXPECT_EQ(model->ln->gamma()->path(), "ln_model/layer_normalization/gamma");
  EXPECT_EQ(model->ln->beta()->path(), "ln_model/layer_normalization/beta");
  EXPECT_EQ(model->ln->gamma()->layout(), TensorLayout({"model"}, mesh));
  EXPECT_EQ(model->ln->beta()->layout(), TensorLayout({None}, mesh));
  const std::vector<double> want = reference(x, nullptr, nullptr, 1e-3);  // gamma 1, beta 0
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got.data_as<float>()[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << i;
  }

  // center=false, scale=false: no weights; a plain normalisation with another epsilon.
  auto plain = std::make_shared<LayerNormalization>(
      LayerNormalizationOptions{.epsilon = 0.5, .center = false, .scale = false});
  EXPECT_EQ(plain->name(), "layer_normalization_1");
  HostTensor y = (*plain)(distribute_tensor(x, TensorLayout({None, "model"}, mesh))).value().gather();
  EXPECT_EQ(plain->gamma(), nullptr);
  EXPECT_EQ(plain->beta(), nullptr);
  EXPECT_TRUE(plain->own_weights().empty());
  const std::vector<double> want2 = reference(x, nullptr, nullptr, 0.5);
  for (size_t i = 0; i < want2.size(); ++i) {
    ASSERT_NEAR(y.data_as<float>()[i], want2[i], 1e-5 * std::max(1.0, std::abs(want2[i]))) << i;
  }
  EXPECT_EQ(plain->compute_output_shape({2, 3, 4}), (Shape{2, 3, 4}));
}

TEST_F(LayerNormalizationTest, BadInputsAreRefused) {
  DeviceMesh one({1}, {"replica"}, std::vector<std::string>{"cpu:0"});
  auto ln = std::make_shared<LayerNormalization>();
  try {
    (*ln)(distribute_tensor(HostTensor(DType::kF64, {2, 3}), TensorLayout({None, None}, one)));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "LayerNormalization layer 'layer_normalization' runs on F32 tensors, got F64");
  }
  try {
    (*ln)(distribute_tensor(HostTensor(DType::kF32, {2, 4}), TensorLayout({None, None}, one)));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "LayerNormalization layer 'layer_normalization' was built for 3 features (the "
                 "last dimension), got an input of shape (2, 4)");
  }
  try {
    LayerNormalization bad(LayerNormalizationOptions{.epsilon = -1});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "LayerNormalization epsilon must be finite and >= 0, got -1");
  }
  auto scalar = std::make_shared<LayerNormalization>();
  try {
    (*scalar)(Tensor::symbolic({}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("needs inputs of rank >= 1, got shape ()"));
  }
}

}  // namespace
}  // namespace meshlayout
