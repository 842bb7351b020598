// Conv2D::backward against float64 central differences of a float64 direct convolution written
// from the formula (TF "same"/"valid" padding), on the 2x4 mesh: x replicated, batch-split,
// H-split (gathered by the call), batch over an axis the filters use (gathered); kernel
// replicated, output-channel-split, in-channel-split and split over both axes; strides 1 and 2,
// even and odd kernels, with and without bias and activation. dx in x's layout, d kernel and
// d bias in their variables' layouts. Also in float64 (built under FloatxScope F64): y within
// 1e-12, gradients within 1e-10 of a five-point stencil; F32 x or dy refused naming both dtypes.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/convolutional/conv2d.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;
const Shape kInput{4, 6, 5, 4};  // (B, H, W, C)
constexpr int64_t kFilters = 8;

struct Config {
  std::array<int64_t, 2> kernel, strides;
  std::string padding;
  Activation activation;
  bool use_bias;
};

// y = act(conv(x, kernel) + bias) in float64, NHWC, kernel (kh, kw, C, F).
std::vector<double> reference(const Params& q, const Config& c) {
  const int64_t B = kInput[0], H = kInput[1], W = kInput[2], C = kInput[3], F = kFilters;
  const int64_t kh = c.kernel[0], kw = c.kernel[1], sh = c.strides[0], sw = c.strides[1];
  const bool same = c.padding == "same";
  const int64_t OH = same ? (H + sh - 1) / sh : (H - kh) / sh + 1;
  const int64_t OW = same ? (W + sw - 1) / sw : (W - kw) / sw + 1;
  const int64_t top = same ? std::max<int64_t>((OH - 1) * sh + kh - H, 0) / 2 : 0;
  const int64_t left = same ? std::max<int64_t>((OW - 1) * sw + kw - W, 0) / 2 : 0;
  const std::vector<double>& x = q.at("x");
  const std::vector<double>& k = q.at("kernel");
  std::vector<double> y;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t f = 0; f < F; ++f) {
          double s = c.use_bias ? q.at("bias")[f] : 0.0;
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t ih = oh * sh + i - top, iw = ow * sw + j - left;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              for (int64_t ch = 0; ch < C; ++ch) {
                s += x[((n * H + ih) * W + iw) * C + ch] * k[((i * kw + j) * C + ch) * F + f];
              }
            }
          y.push_back(c.activation == Activation::kTanh ? std::tanh(s) : s);
        }
  return y;
}

class Conv2DBackwardTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  struct Layouts {
    TensorLayout x, kernel, bias;
  };
  std::vector<Layouts> cases() const {
    return {
        {layout({kNone, kNone, kNone, kNone}), layout({kNone, kNone, kNone, kNone}),
         layout({kNone})},
        {layout({{"data"}, kNone, kNone, kNone}), layout({kNone, kNone, kNone, kNone}),
         layout({kNone})},
        {layout({{"data"}, kNone, kNone, kNone}), layout({kNone, kNone, kNone, {"model"}}),
         layout({{"model"}})},
        {layout({{"data"}, {"model"}, kNone, kNone}), layout({kNone, kNone, {"model"}, kNone}),
         layout({{"data"}})},
        {layout({{"data"}, kNone, kNone, kNone}), layout({kNone, kNone, kNone, {"data", "model"}}),
         layout({{"model"}})},
        {layout({{"model"}, kNone, kNone, {"data"}}), layout({{"data"}, kNone, kNone, {"model"}}),
         layout({kNone})},
    };
  }

  // In F64 (the layer built under FloatxScope F64): y to 1e-12, gradients to 1e-10 of a
  // five-point stencil.
  void check(const Config& c, const Layouts& l, DType dtype = DType::kF32) {
    const bool f64 = dtype == DType::kF64;
    clear_session();
    std::optional<FloatxScope> floatx;
    floatx.emplace(dtype);
    auto conv = std::make_shared<Conv2D>(
        kFilters,
        Conv2DOptions{.kernel_size = c.kernel,
                      .strides = c.strides,
                      .padding = c.padding,
                      .activation = c.activation,
                      .use_bias = c.use_bias,
                      .kernel_initializer = Initializer::random_normal({.stddev = 0.3, .seed = 5}),
                      .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 6}),
                      .kernel_layout = l.kernel,
                      .bias_layout = l.bias});
    floatx.reset();
    conv->maybe_build(kInput);
    ASSERT_EQ(conv->kernel()->dtype(), dtype);
    const std::vector<double> xv = testing::random_values(kInput, 71);
    const Array x = distribute_tensor(testing::to_dtype(kInput, xv, dtype), l.x);
    const Array y = conv->call_on(x);
    EXPECT_EQ(y.dtype(), dtype);
    Params p{{"x", xv}, {"kernel", gathered_f64(conv->kernel()->value())}};
    if (c.use_bias) p["bias"] = gathered_f64(conv->bias()->value());
    auto forward = [&c](const Params& q) { return reference(q, c); };
    expect_close(gathered_f64(y), forward(p), "forward y", f64 ? 1e-12 : 1e-4);
    const std::vector<double> w = testing::random_values(y.shape(), 72);
    const Array dy = distribute_tensor(testing::to_dtype(y.shape(), w, dtype), y.layout());
    Gradients grads;
    const Array dx = conv->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    EXPECT_EQ(dx.dtype(), dtype);
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w, f64 ? 1e-3 : 1e-5, f64),
                 "dx", f64 ? 1e-10 : 1e-4);
    std::vector<std::pair<VariablePtr, std::string>> weights{{conv->kernel(), "kernel"}};
    if (c.use_bias) weights.emplace_back(conv->bias(), "bias");
    EXPECT_EQ(grads.size(), weights.size());
    testing::expect_weight_gradients(grads, weights, forward, p, w, f64);
  }

  void check_all(const Config& c, DType dtype = DType::kF32) {
    for (const Layouts& l : cases()) {
      SCOPED_TRACE("x " + l.x.to_string() + " kernel " + l.kernel.to_string() + " bias " +
                   l.bias.to_string());
      check(c, l, dtype);
    }
  }
};

TEST_F(Conv2DBackwardTest, ValidStride1) {
  check_all({.kernel = {3, 3},
             .strides = {1, 1},
             .padding = "valid",
             .activation = Activation::kLinear,
             .use_bias = true});
}

TEST_F(Conv2DBackwardTest, ValidStride2LeavesUnreadRows) {
  check_all({.kernel = {3, 2},
             .strides = {2, 2},
             .padding = "valid",
             .activation = Activation::kLinear,
             .use_bias = true});
}

TEST_F(Conv2DBackwardTest, SameStride1Tanh) {
  check_all({.kernel = {3, 3},
             .strides = {1, 1},
             .padding = "same",
             .activation = Activation::kTanh,
             .use_bias = true});
}

TEST_F(Conv2DBackwardTest, SameEvenKernelStride2x1NoBias) {
  check_all({.kernel = {2, 4},
             .strides = {2, 1},
             .padding = "same",
             .activation = Activation::kLinear,
             .use_bias = false});
}

TEST_F(Conv2DBackwardTest, Float64SameStride1Tanh) {
  check_all({.kernel = {3, 3},
             .strides = {1, 1},
             .padding = "same",
             .activation = Activation::kTanh,
             .use_bias = true},
            DType::kF64);
}

TEST_F(Conv2DBackwardTest, Float64ValidStride2NoBias) {
  const Config c{.kernel = {3, 2},
                 .strides = {2, 2},
                 .padding = "valid",
                 .activation = Activation::kLinear,
                 .use_bias = false};
  check(c, cases()[2], DType::kF64);
  check(c, cases()[5], DType::kF64);
}

// Built in F64: an F32 x (call and backward) or dy is refused, naming both dtypes.
TEST_F(Conv2DBackwardTest, Float64RefusesF32) {
  std::shared_ptr<Conv2D> conv;
  {
    FloatxScope f64(DType::kF64);
    conv = std::make_shared<Conv2D>(
        kFilters, Conv2DOptions{.kernel_layout = layout({kNone, kNone, kNone, kNone}),
                                .bias_layout = layout({kNone})});
  }
  conv->maybe_build(kInput);
  const std::vector<double> v = testing::random_values(kInput, 1);
  const TensorLayout replicated = layout({kNone, kNone, kNone, kNone});
  const Array x64 = distribute_tensor(testing::to_dtype(kInput, v, DType::kF64), replicated);
  const Array x32 = distribute_tensor(testing::to_dtype(kInput, v, DType::kF32), replicated);
  const Shape out = conv->compute_output_shape(kInput);
  const std::vector<double> w = testing::random_values(out, 2);
  const Array dy64 = distribute_tensor(testing::to_dtype(out, w, DType::kF64), replicated);
  const Array dy32 = distribute_tensor(testing::to_dtype(out, w, DType::kF32), replicated);
  const std::string want =
      "Conv2D layer 'conv2d' computes in F64 (its weights' dtype), got an F32 input; layers "
      "do not cast: convert the input first";
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)conv->call_on(x32); }), want);
  Gradients grads;
  EXPECT_EQ(testing::ValueErrorMessage([&] { (void)conv->backward(x32, dy64, grads); }), want);
  EXPECT_EQ(
      testing::ValueErrorMessage([&] { (void)conv->backward(x64, dy32, grads); }),
      "backward of layer 'conv2d': dy must be F64 of the call's output shape (4, 4, 3, 8), got F32 "
      "(4, 4, 3, 8)");
  EXPECT_EQ(grads.size(), 0u);
}

TEST_F(Conv2DBackwardTest, MaxRelativeError) {
  check({.kernel = {3, 3},
         .strides = {2, 2},
         .padding = "same",
         .activation = Activation::kTanh,
         .use_bias = true},
        cases()[2]);
  std::printf("max relative error seen: %.3g\n", testing::max_relative_error_seen());
}

TEST_F(Conv2DBackwardTest, RefusesBadDyAndUnbuiltLayer) {
  Gradients grads;
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, kInput, 1),
                                    layout({kNone, kNone, kNone, kNone}));
  auto unbuilt = std::make_shared<Conv2D>(kFilters);
  EXPECT_THROW((void)unbuilt->backward(x, x, grads), FailedPreconditionError);
  auto conv = std::make_shared<Conv2D>(
      kFilters, Conv2DOptions{.kernel_layout = layout({kNone, kNone, kNone, kNone}),
                              .bias_layout = layout({kNone})});
  conv->maybe_build(kInput);
  EXPECT_THROW((void)conv->backward(x, x, grads), ValueError);  // dy of x's shape, not y's
  const Shape out = conv->compute_output_shape(kInput);
  const Array dy64 = distribute_tensor(HostTensor::random(DType::kF64, out, 1),
                                       layout({kNone, kNone, kNone, kNone}));
  EXPECT_THROW((void)conv->backward(x, dy64, grads), ValueError);
  EXPECT_EQ(grads.size(), 0u);
}

}  // namespace
}  // namespace meshlayout
