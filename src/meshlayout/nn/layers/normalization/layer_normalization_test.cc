#include "meshlayout/nn/layers/normalization/layer_normalization.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/testing/test_util.h"

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
  for (int64_t i = 0; i < x.num_elements(); ++i)
    x.data_as<float>()[i] = x.data_as<float>()[i] * 3.0f + 1.0f;
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
      {"mesh[data=2,model=4]",
       {3, 5, 10},
       {"data", "model", None},
       TensorLayout::replicated(0),
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

// Built under FloatxScope(F64): gamma and beta F64, the output F64 and within 1e-12 (relative) of
// float64 formulas, on inputs that are not float32 values (a float32 computation would miss by
// ~1e-7), sharded as above; an F32 input then is refused naming both dtypes, and BF16 weights
// are refused at build.
TEST_F(LayerNormalizationTest, Float64ShardedInputsMatchAFloat64Reference) {
  const std::vector<Case> cases = {
      {"mesh[data=2,model=4]", {8, 12}, {"data", None}, {"model"}, {"data", None}},
      {"mesh[data=2,model=4]", {8, 10}, {"data", "model"}, {"model"}, {"data", None}},
      {"mesh[x=8]", {3, 5, 10}, {None, "x", None}, {"x"}, {None, "x", None}},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << n++ << " " << c.mesh << " " << c.input);
    clear_session();
    const DeviceMesh mesh = DeviceMesh::from_string(c.mesh);
    LayoutMap rules(mesh);
    rules["ln.gamma"] = c.gamma;
    rules["ln.beta"] = c.gamma;
    std::shared_ptr<LnModel> model;
    {
      FloatxScope f64(DType::kF64);
      LayoutMapScope scope = rules.scope();
      model = std::make_shared<LnModel>(LayerNormalizationOptions{
          .beta_initializer = Initializer::random_uniform({.minval = -1, .maxval = 1}),
          .gamma_initializer = Initializer::random_normal({.mean = 1, .stddev = 0.5})});
    }
    std::vector<double> xv =
        testing::to_f64(HostTensor::random(DType::kF64, c.shape, static_cast<uint64_t>(n)));
    for (double& v : xv) v = v * 3.0 + 1.0 + 1e-9;
    Tensor y = (*model)(distribute_tensor(testing::to_dtype(c.shape, xv, DType::kF64),
                                          c.input.with_device_mesh(mesh)));
    ASSERT_EQ(model->ln->gamma()->dtype(), DType::kF64);
    ASSERT_EQ(model->ln->beta()->dtype(), DType::kF64);
    ASSERT_EQ(y.value().dtype(), DType::kF64);
    EXPECT_EQ(y.value().layout(), c.want_output.with_device_mesh(mesh));
    const std::vector<double> gamma = testing::gathered_f64(model->ln->gamma()->value());
    const std::vector<double> beta = testing::gathered_f64(model->ln->beta()->value());
    const int64_t row = c.shape.back();
    const std::vector<double> got = testing::gathered_f64(y.value());
    ASSERT_EQ(got.size(), xv.size());
    for (size_t r = 0; r < xv.size() / static_cast<size_t>(row); ++r) {
      const double* v = xv.data() + r * static_cast<size_t>(row);
      double mean = 0, var = 0;
      for (int64_t k = 0; k < row; ++k) mean += v[k] / static_cast<double>(row);
      for (int64_t k = 0; k < row; ++k)
        var += (v[k] - mean) * (v[k] - mean) / static_cast<double>(row);
      for (int64_t k = 0; k < row; ++k) {
        const double want = (v[k] - mean) / std::sqrt(var + 1e-3) * gamma[static_cast<size_t>(k)] +
                            beta[static_cast<size_t>(k)];
        ASSERT_NEAR(got[r * static_cast<size_t>(row) + static_cast<size_t>(k)], want,
                    1e-12 * std::max(1.0, std::abs(want)))
            << r << ", " << k;
      }
    }
    const Array x32 = distribute_tensor(testing::to_dtype(c.shape, xv, DType::kF32),
                                        c.input.with_device_mesh(mesh));
    EXPECT_EQ(testing::ValueErrorMessage([&] { (void)model->ln->call_on(x32); }),
              "LayerNormalization layer 'layer_normalization' computes in F64 (its weights' "
              "dtype), got an "
              "F32 input; layers do not cast: convert the input first");
  }
  std::shared_ptr<LayerNormalization> half;
  {
    FloatxScope bf16(DType::kBF16);
    half = std::make_shared<LayerNormalization>();
  }
  EXPECT_EQ(testing::ValueErrorMessage([&] {
              half->maybe_build({2, 4});
            }),
            "LayerNormalization layer 'layer_normalization_1' has BF16 weights (its dtype); it "
            "computes in "
            "F32 or F64 only: build it under floatx F32 or F64");
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
  HostTensor got =
      (*model)(distribute_tensor(x, TensorLayout({"data", "model"}, mesh))).value().gather();
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
  HostTensor y =
      (*plain)(distribute_tensor(x, TensorLayout({None, "model"}, mesh))).value().gather();
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
    EXPECT_STREQ(e.what(),
                 "LayerNormalization layer 'layer_normalization' computes in F32 (its weights' "
                 "dtype), got an F64 input; layers do not cast: convert the input first");
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
