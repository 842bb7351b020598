#include "meshlayout/nn/layers/regularization/dropout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/philox.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class DropoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
};

class DropModel : public Model {
 public:
  DropModel(double rate, std::optional<uint64_t> seed) : Model("drop_model") {
    drop = track("drop", std::make_shared<Dropout>(rate, DropoutOptions{.seed = seed}));
  }
  Tensor call(const Tensor& x) override { return (*drop)(x); }
  std::shared_ptr<Dropout> drop;
};

std::vector<int64_t> state_of(const Dropout& d) {
  HostTensor s = d.seed_generator()->state()->value().gather();
  return {s.data_as<int64_t>()[0], s.data_as<int64_t>()[1]};
}

// The documented mask, one element at a time with the scalar Philox: keep element g iff
// word g % 4 of block (g / 4, step) under key seed is below (1 - rate) * 2^32.
std::vector<double> reference(const HostTensor& x, double rate, uint64_t seed, uint64_t step) {
  std::vector<double> y(static_cast<size_t>(x.num_elements()));
  const float keep = static_cast<float>(1.0 - rate);
  for (int64_t g = 0; g < x.num_elements(); ++g) {
    const uint64_t gu = static_cast<uint64_t>(g);
    const PhiloxBlock b = philox4x32_10(philox_counter(gu / 4, step), philox_key(seed));
    const bool kept = static_cast<double>(b[gu % 4]) < (1.0 - rate) * 4294967296.0;
    y[static_cast<size_t>(g)] = kept ? static_cast<double>(x.data_as<float>()[g]) / keep : 0.0;
  }
  return y;
}

TEST_F(DropoutTest, TrainingMatchesTheReferenceMaskOnShardedLayouts) {
  struct Case {
    const char* mesh;
    Shape shape;
    TensorLayout layout;
  };
  const std::vector<Case> cases = {
      {"mesh[data=2,model=4]", {8, 16}, {"data", "model"}},
      {"mesh[data=2,model=4]", {5, 7}, {"data", "model"}},  // uneven
      {"mesh[data=2,model=4]", {3, 5, 6}, {None, "data", "model"}},
      {"mesh[x=8]", {9, 3}, {"x", None}},
      {"mesh[x=8]", {4, 13}, {None, "x"}},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << n << " " << c.mesh << " " << c.layout);
    clear_session();
    const DeviceMesh mesh = DeviceMesh::from_string(c.mesh);
    LayoutMap rules(mesh);
    std::shared_ptr<DropModel> model;
    {
      LayoutMapScope scope = rules.scope();
      model = std::make_shared<DropModel>(0.3, 1234 + n);
    }
    model->drop->set_training(true);
    const HostTensor x = HostTensor::random(DType::kF32, c.shape, static_cast<uint64_t>(n));
    for (uint64_t step = 0; step < 2; ++step) {
      HostTensor got =
          (*model)(distribute_tensor(x, c.layout.with_device_mesh(mesh))).value().gather();
      const std::vector<double> want = reference(x, 0.3, 1234 + static_cast<uint64_t>(n), step);
      ASSERT_EQ(got.shape(), c.shape);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got.data_as<float>()[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i])))
            << "step " << step << " element " << i;
        ASSERT_EQ(got.data_as<float>()[i] == 0.0f, want[i] == 0.0) << i;
      }
      EXPECT_EQ(state_of(*model->drop),
                (std::vector<int64_t>{1234 + n, static_cast<int64_t>(step) + 1}));
    }
    ++n;
  }
}

// Built under FloatxScope(F64): y F64 with the documented mask, kept elements x / (1 - rate) in
// double (within 1e-15 relative, on inputs that are not float32 values), sharded; the backward
// F64 against a five-point stencil of that forward (to 1e-10); recompute reuses the mask; F32
// x, dy or recompute input refused naming both dtypes; a BF16 Dropout refused at build.
TEST_F(DropoutTest, Float64TrainingAndBackwardOnShardedLayouts) {
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  const Shape shape{5, 7};
  const TensorLayout layout({"data", "model"}, mesh);
  std::shared_ptr<Dropout> drop;
  {
    FloatxScope f64(DType::kF64);
    drop = std::make_shared<Dropout>(0.3, DropoutOptions{.seed = 77});
  }
  ASSERT_EQ(drop->dtype(), DType::kF64);
  drop->set_training(true);
  std::vector<double> xv = testing::to_f64(HostTensor::random(DType::kF64, shape, 5));
  for (double& v : xv) v += 1e-9;
  const Array x = distribute_tensor(testing::to_dtype(shape, xv, DType::kF64), layout);
  const Array y = drop->call_on(x);
  ASSERT_EQ(y.dtype(), DType::kF64);
  EXPECT_EQ(y.layout(), layout);
  // The mask of (seed 77, step 0), from the F32 reference on random x: nonzero where kept.
  const std::vector<double> kept = reference(HostTensor::random(DType::kF32, shape, 0), 0.3, 77, 0);
  const auto forward = [&](const testing::Params& q) {
    std::vector<double> out(q.at("x").size());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = kept[i] != 0.0 ? q.at("x")[i] / (1.0 - 0.3) : 0.0;
    return out;
  };
  const testing::Params p{{"x", xv}};
  const std::vector<double> want = forward(p);
  const std::vector<double> got = testing::gathered_f64(y);
  int zeros = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-15 * std::max(1.0, std::abs(want[i]))) << i;
    zeros += want[i] == 0.0;
  }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, static_cast<int>(want.size()));
  const std::vector<double> w = testing::random_values(shape, 9);
  const Array dy = distribute_tensor(testing::to_dtype(shape, w, DType::kF64), layout);
  Gradients grads;
  const Array dx = drop->backward(x, dy, grads);
  ASSERT_EQ(dx.dtype(), DType::kF64);
  EXPECT_EQ(dx.layout(), layout);
  testing::expect_close(testing::gathered_f64(dx),
                        testing::numeric_gradient(forward, p, "x", w, 1e-3, true), "dx", 1e-10);
  testing::expect_close(testing::gathered_f64(drop->recompute(x)), want, "recompute", 1e-15);
  const Array x32 = distribute_tensor(testing::to_dtype(shape, xv, DType::kF32), layout);
  const std::string refused =
      "Dropout layer 'dropout' computes in F64 (floatx when the layer was made), got an F32 input; "
      "layers do not cast: "
      "convert the input first";
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)drop->call_on(x32); }), refused);
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)drop->recompute(x32); }), refused);
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)drop->backward(x32, dy, grads); }), refused);
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)drop->backward(x, x32, grads); }),
            "backward of layer 'dropout': dy must be F64 of the call's output shape (5, 7), got "
            "F32 (5, 7)");
  std::shared_ptr<Dropout> half;
  {
    FloatxScope bf16(DType::kBF16);
    half = std::make_shared<Dropout>(0.5);
  }
  EXPECT_EQ(testing::ValueErrorMessage([&] {
              half->maybe_build({2, 3});
            }),
            "Dropout layer 'dropout_1' has BF16 weights (its dtype); it computes in F32 or F64 "
            "only: build it "
            "under floatx F32 or F64");
}

TEST_F(DropoutTest, SameInputGivesTheSameOutputOnEveryMeshAndLayout) {
  const HostTensor x = HostTensor::random(DType::kF32, {6, 10, 7}, 3);
  std::optional<HostTensor> first;
  const std::vector<std::pair<const char*, TensorLayout>> layouts = {
      {"mesh[x=8]", {None, None, None}},
      {"mesh[x=8]", {"x", None, None}},
      {"mesh[x=8]", {None, None, "x"}},
      {"mesh[data=2,model=4]", {"data", "model", None}},
      {"mesh[data=2,model=4]", {"model", None, "data"}},
      {"mesh[data=2,model=4]", {None, {"data", "model"}, None}},
  };
  for (const auto& [mesh_text, layout] : layouts) {
    SCOPED_TRACE(::testing::Message() << mesh_text << " " << layout);
    const DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
    auto drop = std::make_shared<Dropout>(0.5, DropoutOptions{.seed = 99});
    drop->set_training(true);
    HostTensor got = (*drop)(distribute_tensor(x, layout.with_device_mesh(mesh))).value().gather();
    if (!first) first = got;
    EXPECT_EQ(got, *first);  // bit for bit
  }
  // About half the elements are kept.
  int64_t kept = 0;
  for (int64_t i = 0; i < first->num_elements(); ++i) kept += first->data_as<float>()[i] != 0.0f;
  EXPECT_GT(kept, first->num_elements() * 4 / 10);
  EXPECT_LT(kept, first->num_elements() * 6 / 10);
}

TEST_F(DropoutTest, InferenceIsTheIdentityAndLeavesTheStateAlone) {
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  auto drop = std::make_shared<Dropout>(0.4, DropoutOptions{.seed = 5});
  EXPECT_FALSE(drop->training());
  const HostTensor x = HostTensor::random(DType::kF32, {5, 6}, 1);
  Tensor y = (*drop)(distribute_tensor(x, TensorLayout({"data", "model"}, mesh)));
  EXPECT_EQ(y.value().gather(), x);
  EXPECT_EQ(y.value().layout(), TensorLayout({"data", "model"}, mesh));
  EXPECT_EQ(state_of(*drop), (std::vector<int64_t>{5, 0}));  // materialised at once: [seed, 0]
  drop->set_training(true);
  HostTensor a =
      (*drop)(distribute_tensor(x, TensorLayout({"data", "model"}, mesh))).value().gather();
  HostTensor b =
      (*drop)(distribute_tensor(x, TensorLayout({"data", "model"}, mesh))).value().gather();
  EXPECT_NE(a, x);
  EXPECT_NE(a, b);  // the counter moved on
  EXPECT_EQ(state_of(*drop), (std::vector<int64_t>{5, 2}));
  drop->set_training(false);
  EXPECT_EQ((*drop)(distribute_tensor(x, TensorLayout({None, None}, mesh))).value().gather(), x);
  EXPECT_EQ(state_of(*drop), (std::vector<int64_t>{5, 2}));

  // rate 0: no generator (as Keras), the identity even in training.
  auto none = std::make_shared<Dropout>(0.0);
  none->set_training(true);
  EXPECT_EQ(none->seed_generator(), nullptr);
  EXPECT_TRUE(none->sublayers().empty());
  EXPECT_EQ((*none)(distribute_tensor(x, TensorLayout({"data", None}, mesh))).value().gather(), x);
}

TEST_F(DropoutTest, StateVariableIsLaidOutAndNamedLikeAnyVariable) {
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  LayoutMap rules(mesh);
  rules["kernel"] = {None, "model"};  // matches nothing here
  std::shared_ptr<DropModel> model;
  {
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<DropModel>(0.25, 17);
    EXPECT_TRUE(model->drop->seed_generator()->state()->is_lazy());
  }
  EXPECT_EQ(model->drop->name(), "dropout");
  EXPECT_EQ(model->drop->seed_generator()->name(), "seed_generator");
  model->drop->set_training(true);
  (*model)(distribute_tensor(HostTensor::random(DType::kF32, {4, 4}, 2),
                             TensorLayout({"data", None}, mesh)));
  const VariablePtr& state = model->drop->seed_generator()->state();
  EXPECT_EQ(state->name(), "seed_generator_state");
  EXPECT_EQ(state->object_path(), "drop.seed_generator.seed_generator_state");
  // Keras 3: the generator is created in Dropout's constructor, outside any scope.
  EXPECT_EQ(state->path(), "seed_generator/seed_generator_state");
  EXPECT_EQ(state->layout_key(), "");  // Keras 2 maps RNG state with the object path ""
  EXPECT_EQ(state->layout(), TensorLayout({None}, mesh));  // replicated on the map's mesh
  EXPECT_EQ(state->dtype(), DType::kI64);
  EXPECT_EQ(state->shape(), (Shape{2}));
  EXPECT_FALSE(state->trainable());
  EXPECT_EQ(state_of(*model->drop), (std::vector<int64_t>{17, 1}));
  EXPECT_EQ(model->variables().size(), 1u);

  auto second = std::make_shared<Dropout>(0.5);
  EXPECT_EQ(second->name(), "dropout_1");
  EXPECT_EQ(second->seed_generator()->name(), "seed_generator_1");
  EXPECT_EQ(second->seed_generator()->state()->path(), "seed_generator_1/seed_generator_state");
  EXPECT_EQ(state_of(*second), (std::vector<int64_t>{0, 0}));  // the global seed, 0
  EXPECT_EQ(second->compute_output_shape({2, 3}), (Shape{2, 3}));
}

TEST_F(DropoutTest, BadRateAndDtypeAreRefused) {
  for (double rate : {1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    try {
      Dropout d(rate);
      FAIL() << rate;
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(),
                  ::testing::StartsWith("Invalid value received for argument `rate` of "
                                        "Dropout: expected a float in [0, 1), received rate="));
    }
  }
  try {
    Dropout d(1.0);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Invalid value received for argument `rate` of Dropout: expected a float "
                 "in [0, 1), received rate=1");
  }
  clear_session();  // the refused layers took automatic names, as in Keras
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[x=8]");
  auto drop = std::make_shared<Dropout>(0.5);
  try {
    (*drop)(distribute_tensor(HostTensor(DType::kI32, {8}), TensorLayout({"x"}, mesh)));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Dropout layer 'dropout' computes in F32 (floatx when the layer was made), got an "
                 "I32 input; "
                 "layers do not cast: convert the input first");
  }
}

}  // namespace
}  // namespace meshlayout
