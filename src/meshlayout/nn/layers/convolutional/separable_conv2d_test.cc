// SeparableConv2D: Keras paths, shapes and argument checks; the forward against a float64
// depthwise-then-pointwise reference (TF padding) and dx, d depthwise, d pointwise, d bias
// against float64 central differences, replicated and sharded on the 2x4 mesh (batch split,
// H split gathered, pointwise kernel split on filters — column-parallel — or on in·M —
// row-parallel, depthwise kernel split on channels), strides 1 and 2, valid and same, with an
// activation, in F32 and F64; the weights laid out by a ModelParallel distribution's rules.
#include "meshlayout/nn/layers/convolutional/separable_conv2d.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using ::testing::HasSubstr;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;
const Shape kInput{2, 5, 6, 4};  // (B, H, W, C)
constexpr int64_t kFilters = 8, kMultiplier = 2;

struct Config {
  std::array<int64_t, 2> strides;
  std::string padding;
  Activation activation;
};

std::vector<double> reference(const Params& q, const Config& c) {
  const int64_t B = kInput[0], H = kInput[1], W = kInput[2], C = kInput[3], M = kMultiplier,
                F = kFilters;
  const int64_t kh = 3, kw = 3, sh = c.strides[0], sw = c.strides[1];
  const bool same = c.padding == "same";
  const int64_t OH = same ? (H + sh - 1) / sh : (H - kh) / sh + 1;
  const int64_t OW = same ? (W + sw - 1) / sw : (W - kw) / sw + 1;
  const int64_t top = same ? std::max<int64_t>((OH - 1) * sh + kh - H, 0) / 2 : 0;
  const int64_t left = same ? std::max<int64_t>((OW - 1) * sw + kw - W, 0) / 2 : 0;
  const std::vector<double>& x = q.at("x");
  const std::vector<double>& dk = q.at("depthwise");
  const std::vector<double>& pk = q.at("pointwise");
  std::vector<double> y;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        std::vector<double> d(static_cast<size_t>(C * M), 0.0);
        for (int64_t i = 0; i < kh; ++i)
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ih = oh * sh + i - top, iw = ow * sw + j - left;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            for (int64_t ch = 0; ch < C; ++ch)
              for (int64_t m = 0; m < M; ++m) {
                d[ch * M + m] +=
                    x[((n * H + ih) * W + iw) * C + ch] * dk[((i * kw + j) * C + ch) * M + m];
              }
          }
        for (int64_t f = 0; f < F; ++f) {
          double s = q.at("bias")[f];
          for (int64_t k = 0; k < C * M; ++k) s += d[k] * pk[k * F + f];
          y.push_back(c.activation == Activation::kTanh ? std::tanh(s) : s);
        }
      }
  return y;
}

class SeparableConv2DTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }
  static Initializer normal(uint64_t seed) {
    return Initializer::random_normal({.stddev = 0.4, .seed = seed});
  }

  struct Layouts {
    TensorLayout x, depthwise, pointwise, bias;
  };

  void check(const Config& c, const Layouts& l, DType dtype) {
    const bool f64 = dtype == DType::kF64;
    clear_session();
    std::optional<FloatxScope> floatx(dtype);
    auto sep = std::make_shared<SeparableConv2D>(
        kFilters, SeparableConv2DOptions{.strides = c.strides,
                                         .padding = c.padding,
                                         .depth_multiplier = kMultiplier,
                                         .activation = c.activation,
                                         .depthwise_initializer = normal(3),
                                         .pointwise_initializer = normal(4),
                                         .bias_initializer = normal(5),
                                         .depthwise_kernel_layout = l.depthwise,
                                         .pointwise_kernel_layout = l.pointwise,
                                         .bias_layout = l.bias});
    floatx.reset();
    const std::vector<double> xv = testing::random_values(kInput, 41);
    const Array x = distribute_tensor(testing::to_dtype(kInput, xv, dtype), l.x);
    const Array y = sep->call_on(x);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_EQ(y.shape(), sep->compute_output_shape(kInput));
    Params p{{"x", xv},
             {"depthwise", gathered_f64(sep->depthwise_kernel()->value())},
             {"pointwise", gathered_f64(sep->pointwise_kernel()->value())},
             {"bias", gathered_f64(sep->bias()->value())}};
    auto forward = [&c](const Params& q) { return reference(q, c); };
    expect_close(gathered_f64(y), forward(p), "forward y", f64 ? 1e-12 : 1e-5);
    const std::vector<double> w = testing::random_values(y.shape(), 42);
    const Array dy = distribute_tensor(testing::to_dtype(y.shape(), w, dtype), y.layout());
    Gradients grads;
    const Array dx = sep->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w, f64 ? 1e-3 : 1e-5, f64),
                 "dx", f64 ? 1e-10 : 1e-4);
    EXPECT_EQ(grads.size(), 3u);
    testing::expect_weight_gradients(grads,
                                     {{sep->depthwise_kernel(), "depthwise"},
                                      {sep->pointwise_kernel(), "pointwise"},
                                      {sep->bias(), "bias"}},
                                     forward, p, w, f64);
  }
};

TEST_F(SeparableConv2DTest, PathsShapesAndArgumentChecksAreKeras) {
  auto sep = std::make_shared<SeparableConv2D>(16, SeparableConv2DOptions{.depth_multiplier = 3});
  EXPECT_EQ(sep->name(), "separable_conv2d");
  (*sep)(Input({8, 9, 5}, 2));
  EXPECT_EQ(sep->depthwise_kernel()->path(), "separable_conv2d/depthwise_kernel");
  EXPECT_EQ(sep->pointwise_kernel()->path(), "separable_conv2d/pointwise_kernel");
  EXPECT_EQ(sep->bias()->path(), "separable_conv2d/bias");
  EXPECT_EQ(sep->depthwise_kernel()->shape(), (Shape{3, 3, 5, 3}));
  EXPECT_EQ(sep->pointwise_kernel()->shape(), (Shape{1, 1, 15, 16}));
  EXPECT_EQ(sep->bias()->shape(), (Shape{16}));
  EXPECT_EQ(sep->compute_output_shape({2, 8, 9, 5}), (Shape{2, 6, 7, 16}));
  for (double b : gathered_f64(sep->bias()->value())) EXPECT_EQ(b, 0.0);
  auto no_bias = std::make_shared<SeparableConv2D>(4, SeparableConv2DOptions{.use_bias = false});
  (*no_bias)(Input({8, 9, 5}, 2));
  EXPECT_EQ(no_bias->variables().size(), 2u);
  try {
    SeparableConv2D bad(0);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Received filters=0."));
  }
  try {
    SeparableConv2D bad(4, {.depth_multiplier = 0});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Received depth_multiplier=0."));
  }
  EXPECT_THROW(SeparableConv2D(4, {.padding = "causal"}), ValueError);
  EXPECT_THROW(SeparableConv2D(4, {.strides = {0, 1}}), ValueError);
  auto flat = std::make_shared<SeparableConv2D>(4);
  EXPECT_THROW(flat->build_standalone({2, 8, 5}), ValueError);
  try {
    (void)sep->call_on(
        distribute_tensor(HostTensor(DType::kF32, {2, 8, 9, 4}),
                          TensorLayout::replicated(4, sep->depthwise_kernel()->value().mesh())));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("was built for 5 input channels, got an input of shape (2, 8, 9, 4)"));
  }
}

TEST_F(SeparableConv2DTest, ForwardAndGradientsUnderShardedLayouts) {
  const std::vector<Layouts> layouts = {
      {layout({kNone, kNone, kNone, kNone}), layout({kNone, kNone, kNone, kNone}),
       layout({kNone, kNone, kNone, kNone}), layout({kNone})},
      {layout({{"data"}, kNone, kNone, kNone}), layout({kNone, kNone, kNone, kNone}),
       layout({kNone, kNone, kNone, {"model"}}), layout({{"model"}})},  // column-parallel pointwise
      {layout({{"data"}, {"model"}, kNone, kNone}), layout({kNone, kNone, {"model"}, kNone}),
       layout({kNone, kNone, {"model"}, kNone}), layout({kNone})},  // row-parallel pointwise
  };
  const std::vector<Config> configs = {{{1, 1}, "valid", Activation::kLinear},
                                       {{2, 2}, "same", Activation::kTanh},
                                       {{1, 2}, "same", Activation::kLinear}};
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    for (const Config& c : configs) {
      for (const Layouts& l : layouts) {
        SCOPED_TRACE(fmt::format("{} strides ({}, {}) {} x {} depthwise {} pointwise {}",
                                 dtype_name(dtype), c.strides[0], c.strides[1], c.padding,
                                 l.x.to_string(), l.depthwise.to_string(),
                                 l.pointwise.to_string()));
        check(c, l, dtype);
      }
    }
  }
}

TEST_F(SeparableConv2DTest, ModelParallelLaysOutTheKernelsByTheirPaths) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map["separable_conv2d/pointwise_kernel"] = {None, None, None, "model"};
  map["separable_conv2d/bias"] = {"model"};
  auto mp = std::make_shared<ModelParallel>(map);
  DistributionScope scope = mp->scope();
  auto sep = std::make_shared<SeparableConv2D>(
      kFilters, SeparableConv2DOptions{.padding = "same", .depth_multiplier = kMultiplier});
  const Tensor y = (*sep)(mp->distribute_input(HostTensor::random(DType::kF32, kInput, 43)));
  EXPECT_EQ(sep->pointwise_kernel()->layout(), layout({kNone, kNone, kNone, {"model"}}));
  EXPECT_EQ(sep->bias()->layout(), layout({{"model"}}));
  EXPECT_EQ(sep->depthwise_kernel()->layout(), layout({kNone, kNone, kNone, kNone}));
  EXPECT_EQ(y.value().layout(), layout({{"data"}, kNone, kNone, {"model"}}));
}

}  // namespace
}  // namespace meshlayout
