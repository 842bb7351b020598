// PReLU: Keras paths and shapes (p_re_lu/alpha, shared_axes), a Keras example, the forward
// against a float64 reference and dx, d alpha against float64 central differences, replicated
// and sharded (batch over 'data', features over 'model', alpha split like them), with and
// without shared axes, in F32 and F64; the errors.
#include "meshlayout/nn/layers/activations/prelu.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using ::testing::HasSubstr;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;

class PReLUTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }
};

// y[b, i…] = x >= 0 ? x : alpha[i… with shared axes at 0] · x.
std::vector<double> reference(const Params& q, const Shape& x_shape, const Shape& alpha_shape) {
  const std::vector<double>& x = q.at("x");
  const std::vector<double>& alpha = q.at("alpha");
  std::vector<double> y(x.size());
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t rest = static_cast<int64_t>(k), a = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 1; --d) {
      const int64_t i = rest % x_shape[d];
      rest /= x_shape[d];
      if (alpha_shape[d - 1] != 1) a += i * stride;
      stride *= alpha_shape[d - 1];
    }
    y[k] = x[k] >= 0 ? x[k] : alpha[a] * x[k];
  }
  return y;
}

TEST_F(PReLUTest, PathsShapesAndAKerasExample) {
  auto p = std::make_shared<PReLU>(PReLUOptions{.alpha_initializer = Initializer::constant(0.25)});
  EXPECT_EQ(p->name(), "p_re_lu");  // keras auto_name("PReLU")
  HostTensor x(DType::kF32, {1, 4});
  const float v[] = {-2, -1, 0, 1};
  std::copy(v, v + 4, x.data_as<float>());
  const Tensor y = (*p)(distribute_tensor(
      x, TensorLayout::replicated(
             2, DeviceMesh({1}, {"replica"}, std::vector<std::string>{"cpu:0"}))));
  EXPECT_EQ(p->alpha()->path(), "p_re_lu/alpha");
  EXPECT_EQ(p->alpha()->shape(), (Shape{4}));
  EXPECT_EQ(testing::gathered_f64(y.value()), (std::vector<double>{-0.5, -0.25, 0, 1}));
  auto shared = std::make_shared<PReLU>(PReLUOptions{.shared_axes = {1, 2}});
  (*shared)(Input({5, 6, 3}, 2));
  EXPECT_EQ(shared->alpha()->path(), "p_re_lu_1/alpha");
  EXPECT_EQ(shared->alpha()->shape(), (Shape{1, 1, 3}));
  for (double a : gathered_f64(shared->alpha()->value()))
    EXPECT_EQ(a, 0.0);  // Keras' default: zeros
}

TEST_F(PReLUTest, ForwardAndGradientsUnderShardedLayouts) {
  struct Case {
    Shape x_shape;
    std::vector<int64_t> shared_axes;
    TensorLayout x, alpha;
  };
  const std::vector<Case> cases = {
      {{4, 3, 8}, {}, layout({kNone, kNone, kNone}), layout({kNone, kNone})},
      {{4, 3, 8}, {}, layout({{"data"}, kNone, {"model"}}), layout({kNone, {"model"}})},
      {{4, 3, 8}, {1}, layout({{"data"}, {"model"}, kNone}), layout({kNone, kNone})},
      {{2, 3, 4, 8},
       {1, 2},
       layout({{"data"}, kNone, kNone, {"model"}}),
       layout({kNone, kNone, {"model"}})},
      {{2, 3, 4, 8},
       {2},
       layout({kNone, {"data"}, kNone, {"model"}}),
       layout({kNone, kNone, {"data", "model"}})},
  };
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    const bool f64 = dtype == DType::kF64;
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} x {} {} shared [{}]", dtype_name(dtype),
                               shape_to_string(c.x_shape), c.x.to_string(),
                               fmt::join(c.shared_axes, ", ")));
      clear_session();
      std::optional<FloatxScope> floatx(dtype);
      auto prelu = std::make_shared<PReLU>(
          PReLUOptions{.alpha_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 7}),
                       .shared_axes = c.shared_axes,
                       .alpha_layout = c.alpha});
      floatx.reset();
      const std::vector<double> xv = testing::random_values(c.x_shape, 31);
      const Array x = distribute_tensor(testing::to_dtype(c.x_shape, xv, dtype), c.x);
      const Array y = prelu->call_on(x);
      EXPECT_EQ(y.layout(), x.layout());
      EXPECT_EQ(prelu->alpha()->layout(), c.alpha);
      const Shape alpha_shape = prelu->alpha()->shape();
      Params p{{"x", xv}, {"alpha", gathered_f64(prelu->alpha()->value())}};
      auto forward = [&](const Params& q) { return reference(q, c.x_shape, alpha_shape); };
      expect_close(gathered_f64(y), forward(p), "forward y", f64 ? 1e-12 : 1e-6);
      const std::vector<double> w = testing::random_values(c.x_shape, 32);
      const Array dy = distribute_tensor(testing::to_dtype(c.x_shape, w, dtype), y.layout());
      Gradients grads;
      const Array dx = prelu->backward(x, dy, grads);
      EXPECT_EQ(dx.layout(), x.layout());
      expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w, f64 ? 1e-3 : 1e-5, f64),
                   "dx", f64 ? 1e-10 : 1e-4);
      testing::expect_weight_gradients(grads, {{prelu->alpha(), "alpha"}}, forward, p, w, f64);
    }
  }
}

TEST_F(PReLUTest, BadInputsAreRefusedByName) {
  auto batch_axis = std::make_shared<PReLU>(PReLUOptions{.shared_axes = {0}});
  try {
    batch_axis->build_standalone({2, 3});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("shared_axes [0] must be input axes in [1, 1]"));
  }
  auto flat = std::make_shared<PReLU>();
  EXPECT_THROW(flat->build_standalone({5}), ValueError);
  auto p = std::make_shared<PReLU>(PReLUOptions{.alpha_layout = layout({kNone})});
  p->build_standalone({2, 4});
  const Array wrong = distribute_tensor(HostTensor(DType::kF32, {2, 5}), layout({kNone, kNone}));
  try {
    (void)p->call_on(wrong);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("was built for inputs of shape (2, 4) (any batch), got (2, 5)"));
  }
  Gradients grads;
  const Array x = distribute_tensor(HostTensor(DType::kF32, {2, 4}), layout({kNone, kNone}));
  const Array dy = distribute_tensor(HostTensor(DType::kF64, {2, 4}), layout({kNone, kNone}));
  EXPECT_THROW((void)p->backward(x, dy, grads), ValueError);
  auto unbuilt = std::make_shared<PReLU>();
  EXPECT_THROW((void)unbuilt->backward(x, x, grads), FailedPreconditionError);
}

}  // namespace
}  // namespace meshlayout
