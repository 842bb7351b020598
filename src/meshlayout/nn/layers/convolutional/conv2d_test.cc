#include "meshlayout/nn/layers/convolutional/conv2d.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

class Conv2DTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
};

// Direct convolution in float64, TF padding rules.
std::vector<double> reference(const HostTensor& x, const HostTensor& k, const HostTensor& b,
                              int64_t sh, int64_t sw, bool same, Shape* out_shape) {
  const int64_t B = x.shape()[0], H = x.shape()[1], W = x.shape()[2], C = x.shape()[3];
  const int64_t kh = k.shape()[0], kw = k.shape()[1], F = k.shape()[3];
  const int64_t OH = same ? (H + sh - 1) / sh : (H - kh) / sh + 1;
  const int64_t OW = same ? (W + sw - 1) / sw : (W - kw) / sw + 1;
  const int64_t top = same ? std::max<int64_t>((OH - 1) * sh + kh - H, 0) / 2 : 0;
  const int64_t left = same ? std::max<int64_t>((OW - 1) * sw + kw - W, 0) / 2 : 0;
  *out_shape = {B, OH, OW, F};
  std::vector<double> y(static_cast<size_t>(B * OH * OW * F));
  for (int64_t n = 0; n < B; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t f = 0; f < F; ++f) {
          double s = b.data_as<float>()[f];
          for (int64_t i = 0; i < kh; ++i)
            for (int64_t j = 0; j < kw; ++j) {
              const int64_t ih = oh * sh + i - top, iw = ow * sw + j - left;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              for (int64_t c = 0; c < C; ++c) {
                s += static_cast<double>(x.data_as<float>()[((n * H + ih) * W + iw) * C + c]) *
                     k.data_as<float>()[((i * kw + j) * C + c) * F + f];
              }
            }
          y[static_cast<size_t>(((n * OH + oh) * OW + ow) * F + f)] = s;
        }
  return y;
}

class ConvModel : public Model {
 public:
  ConvModel(int64_t filters, Conv2DOptions options) : Model("conv_model") {
    conv = track("conv", std::make_shared<Conv2D>(filters, std::move(options)));
  }
  Tensor call(const Tensor& x) override { return (*conv)(x); }
  std::shared_ptr<Conv2D> conv;
};

TEST_F(Conv2DTest, MatchesAFloat64ReferenceOnEveryLayout) {
  struct Case {
    const char* mesh;
    std::vector<DimSharding> kernel;
    std::vector<DimSharding> input;
    int64_t filters;
    int64_t stride;
    const char* padding;
  };
  const std::vector<Case> cases{
      {"mesh[data=2,model=4]",
       {None, None, None, "model"},
       {"data", None, None, None},
       8,
       1,
       "same"},
      {"mesh[data=2,model=4]",
       {None, None, None, "model"},
       {"data", None, None, None},
       6,
       2,
       "same"},
      {"mesh[data=2,model=4]", {None, None, None, None}, {None, None, None, None}, 5, 1, "valid"},
      {"mesh[data=2,model=4]",
       {None, None, "data", "model"},
       {None, "model", None, None},
       7,
       2,
       "valid"},
      {"mesh[x=8]", {None, None, None, "x"}, {None, None, None, None}, 6, 1, "same"},
      {"mesh[x=8]", {None, None, None, None}, {"x", None, None, None}, 3, 2, "same"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} filters {} stride {} {}", c.mesh, c.filters, c.stride, c.padding));
    clear_session();
    DeviceMesh mesh = DeviceMesh::from_string(c.mesh);
    LayoutMap rules(mesh);
    rules["conv.kernel"] = TensorLayout(c.kernel);
    std::shared_ptr<ConvModel> m;
    {
      LayoutMapScope scope = rules.scope();
      m = std::make_shared<ConvModel>(
          c.filters, Conv2DOptions{.kernel_size = {3, 2},
                                   .strides = {c.stride, c.stride},
                                   .padding = c.padding,
                                   .bias_initializer = Initializer::random_normal()});
    }
    HostTensor x = HostTensor::random(DType::kF32, {5, 7, 6, 3}, 9);
    HostTensor y = (*m)(distribute_tensor(x, TensorLayout(c.input, mesh))).value().gather();
    EXPECT_EQ(m->conv->kernel()->layout(), TensorLayout(c.kernel, mesh));
    Shape want_shape;
    std::vector<double> want =
        reference(x, m->conv->kernel()->value().gather(), m->conv->bias()->value().gather(),
                  c.stride, c.stride, std::string(c.padding) == "same", &want_shape);
    ASSERT_EQ(y.shape(), want_shape);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(y.data_as<float>()[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << i;
    }
  }
}

TEST_F(Conv2DTest, NamesAndPaths) {
  DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  LayoutMap rules(mesh);
  std::shared_ptr<ConvModel> m;
  {
    LayoutMapScope scope = rules.scope();
    m = std::make_shared<ConvModel>(4, Conv2DOptions{});
  }
  (*m)(Tensor::symbolic({2, 5, 5, 3}));
  EXPECT_EQ(m->conv->name(), "conv2d");
  EXPECT_EQ(m->conv->kernel()->object_path(), "conv.kernel");
  EXPECT_EQ(m->conv->kernel()->path(), "conv_model/conv2d/kernel");
  EXPECT_EQ(m->conv->kernel()->shape(), (Shape{3, 3, 3, 4}));
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(Conv2DTest, BadInputsGetClearErrors) {
  EXPECT_EQ(error_of([] { Conv2D(0); }), "Conv2D filters must be at least 1, got 0");
  EXPECT_EQ(error_of([] {
              Conv2D(2, {.kernel_size = {0, 3}});
            }),
            "Conv2D kernel_size and strides must be at least 1, got kernel_size=(0, 3), "
            "strides=(1, 1)");
  EXPECT_EQ(error_of([] { Conv2D(2, {.padding = "full"}); }),
            "Conv2D padding must be 'valid' or 'same', got 'full'");
  auto conv = std::make_shared<Conv2D>(2, Conv2DOptions{.name = "c"});
  EXPECT_EQ(error_of([&] {
              (*conv)(Tensor::symbolic({2, 5, 5}));
            }),
            "Conv2D layer 'c' takes NHWC inputs of rank 4, got shape (2, 5, 5)");
  (*conv)(Tensor::symbolic({2, 5, 5, 3}));
  EXPECT_EQ(error_of([&] {
              (*conv)(Tensor::symbolic({2, 5, 5, 4}));
            }),
            "Conv2D layer 'c' was built for 3 input channels, got an input of shape (2, 5, 5, 4)");
  // Another dtype than the kernel's (F32 here; F64: conv2d_backward_test.cc) names both.
  const DeviceMesh one = DeviceMesh::from_string("mesh[x=1]");
  EXPECT_EQ(error_of([&] {
              (void)conv->call_on(distribute_tensor(HostTensor(DType::kF64, {2, 5, 5, 3}),
                                                    TensorLayout::replicated(4, one)));
            }),
            "Conv2D layer 'c' computes in F32 (its weights' dtype), got an F64 input; layers do "
            "not cast: "
            "convert the input first");
  // Built under floatx BF16: refused at build rather than reading BF16 weights as floats.
  std::shared_ptr<Conv2D> half;
  {
    FloatxScope bf16(DType::kBF16);
    half = std::make_shared<Conv2D>(2, Conv2DOptions{.name = "h"});
  }
  EXPECT_EQ(error_of([&] {
              half->maybe_build({2, 5, 5, 3});
            }),
            "Conv2D layer 'h' has BF16 weights (its dtype); it computes in F32 or F64 only: build "
            "it under "
            "floatx F32 or F64");
}

}  // namespace
}  // namespace meshlayout
