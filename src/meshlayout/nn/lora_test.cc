// LoRA on Dense and Conv2D (keras enable_lora, lora.h): names, shapes, initialisers, the frozen
// kernel, the regulariser and the errors; the forward against a float64 reference with the
// effective kernel K + (alpha / rank)·A@B, and dx, dA, dB against float64 central differences
// (the kernel gets none), replicated and sharded on the 2x4 mesh, in float32 and float64; the
// LoRA weights laid out by a ModelParallel distribution's rules for their paths.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/convolutional/conv2d.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;
constexpr int64_t kRank = 2;
constexpr double kAlpha = 3.0;  // scale 1.5

// K (R, N) + s · A (R, r) @ B (r, N), every row of K's leading dimensions flattened.
std::vector<double> effective(const Params& q, int64_t n) {
  std::vector<double> k = q.at("kernel");
  const std::vector<double>& a = q.at("a");
  const std::vector<double>& b = q.at("b");
  const double s = kAlpha / kRank;
  for (int64_t i = 0; i < static_cast<int64_t>(k.size()) / n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t r = 0; r < kRank; ++r) k[i * n + j] += s * a[i * kRank + r] * b[r * n + j];
    }
  }
  return k;
}

// Dense: y = tanh(x (B, I) · K_eff (I, N) + bias).
std::vector<double> dense_reference(const Params& q, int64_t rows, int64_t in, int64_t n) {
  const std::vector<double> k = effective(q, n);
  std::vector<double> y;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < n; ++o) {
      double s = q.at("bias")[o];
      for (int64_t i = 0; i < in; ++i) s += q.at("x")[r * in + i] * k[i * n + o];
      y.push_back(std::tanh(s));
    }
  }
  return y;
}

// Conv2D, "same" padding, stride 1, 3x3: y = conv(x (B, H, W, C), K_eff (3, 3, C, F)) + bias.
const Shape kImages{2, 4, 5, 3};
constexpr int64_t kFilters = 8;
std::vector<double> conv_reference(const Params& q) {
  const int64_t B = kImages[0], H = kImages[1], W = kImages[2], C = kImages[3], F = kFilters;
  const std::vector<double> k = effective(q, F);
  const std::vector<double>& x = q.at("x");
  std::vector<double> y;
  for (int64_t n = 0; n < B; ++n)
    for (int64_t oh = 0; oh < H; ++oh)
      for (int64_t ow = 0; ow < W; ++ow)
        for (int64_t f = 0; f < F; ++f) {
          double s = q.at("bias")[f];
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              const int64_t ih = oh + i - 1, iw = ow + j - 1;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              for (int64_t c = 0; c < C; ++c)
                s += x[((n * H + ih) * W + iw) * C + c] * k[((i * 3 + j) * C + c) * F + f];
            }
          y.push_back(s);
        }
  return y;
}

class LoraTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  // Runs `layer` (built, LoRA enabled) on x, checks y against `reference` and every gradient
  // against central differences: dx, d lora_kernel_a, d lora_kernel_b, d bias; none for the
  // frozen kernel.
  template <typename L>
  void check_layer(L& layer, const Shape& x_shape, const TensorLayout& x_layout, DType dtype,
                   const std::function<std::vector<double>(const Params&)>& reference) {
    const bool f64 = dtype == DType::kF64;
    const std::vector<double> xv = testing::random_values(x_shape, 21);
    const Array x = distribute_tensor(testing::to_dtype(x_shape, xv, dtype), x_layout);
    const Array y = layer.call_on(x);
    Params p{{"x", xv},
             {"kernel", gathered_f64(layer.kernel()->value())},
             {"bias", gathered_f64(layer.bias()->value())},
             {"a", gathered_f64(layer.lora_kernel_a()->value())},
             {"b", gathered_f64(layer.lora_kernel_b()->value())}};
    expect_close(gathered_f64(y), reference(p), "forward y", f64 ? 1e-12 : 1e-4);
    const std::vector<double> w = testing::random_values(y.shape(), 22);
    const Array dy = distribute_tensor(testing::to_dtype(y.shape(), w, dtype), y.layout());
    Gradients grads;
    const Array dx = layer.backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), numeric_gradient(reference, p, "x", w, f64 ? 1e-3 : 1e-5, f64),
                 "dx", f64 ? 1e-10 : 1e-4);
    EXPECT_EQ(grads.find(*layer.kernel()), nullptr) << "the frozen kernel got a gradient";
    EXPECT_EQ(grads.size(), 3u);
    testing::expect_weight_gradients(
        grads, {{layer.lora_kernel_a(), "a"}, {layer.lora_kernel_b(), "b"}, {layer.bias(), "bias"}},
        reference, p, w, f64);
  }

  static Initializer normal(uint64_t seed) {
    return Initializer::random_normal({.stddev = 0.5, .seed = seed});
  }
};

TEST_F(LoraTest, DenseWeightsAreKeras) {
  auto dense = std::make_shared<Dense>(6, DenseOptions{.kernel_regularizer = Regularizer::L2(0.1)});
  EXPECT_THROW(dense->enable_lora(2), ValueError);  // not built
  dense->build_standalone({3, 5});
  dense->enable_lora(4);
  EXPECT_EQ(dense->lora_kernel_a()->path(), "dense/lora_kernel_a");
  EXPECT_EQ(dense->lora_kernel_b()->path(), "dense/lora_kernel_b");
  EXPECT_EQ(dense->lora_kernel_a()->object_path(), "dense.lora_kernel_a");
  EXPECT_EQ(dense->lora_kernel_a()->shape(), (Shape{5, 4}));
  EXPECT_EQ(dense->lora_kernel_b()->shape(), (Shape{4, 6}));
  EXPECT_EQ(dense->lora().alpha, 4.0);  // lora_alpha defaults to rank
  EXPECT_EQ(dense->lora().scale(), 1.0);
  EXPECT_FALSE(dense->kernel()->trainable());
  EXPECT_TRUE(dense->lora_kernel_a()->trainable());
  EXPECT_TRUE(dense->lora_kernel_b()->trainable());
  // he_uniform A (limit sqrt(6 / fan_in), fan_in = 5), zeros B: the output is unchanged at first.
  const std::vector<double> a = gathered_f64(dense->lora_kernel_a()->value());
  const double limit = std::sqrt(6.0 / 5.0);
  double spread = 0;
  for (double v : a) {
    EXPECT_LE(std::abs(v), limit);
    spread = std::max(spread, std::abs(v));
  }
  EXPECT_GT(spread, 0.3 * limit);
  for (double v : gathered_f64(dense->lora_kernel_b()->value())) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(dense->variables().size(), 4u);
  // The kernel's regulariser on A and B (Keras), none from the frozen kernel: A's penalty, then
  // B's (zeros: 0).
  ASSERT_EQ(dense->losses().size(), 2u);
  double a_penalty = 0;
  for (double v : a) a_penalty += 0.1 * v * v;
  EXPECT_NEAR(dense->losses()[0], a_penalty, 1e-6 * a_penalty);
  EXPECT_EQ(dense->losses()[1], 0.0);
  try {
    dense->enable_lora(2);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'dense': LoRA is already enabled"), std::string::npos)
        << e.what();
  }
  auto other = std::make_shared<Dense>(6);
  other->build_standalone({3, 5});
  try {
    other->enable_lora(0);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'dense_1': rank must be >= 1, got 0"), std::string::npos)
        << e.what();
  }
}

TEST_F(LoraTest, DenseForwardAndGradientsUnderShardedLayouts) {
  struct Case {
    TensorLayout x, kernel;
  };
  const std::vector<Case> cases = {
      {layout({kNone, kNone}), layout({kNone, kNone})},
      {layout({{"data"}, kNone}), layout({kNone, {"model"}})},      // column-parallel
      {layout({{"data"}, {"model"}}), layout({{"model"}, kNone})},  // row-parallel
  };
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} x {} kernel {}", dtype_name(dtype), c.x.to_string(),
                               c.kernel.to_string()));
      clear_session();
      std::optional<FloatxScope> floatx(dtype);
      auto dense = std::make_shared<Dense>(6, DenseOptions{.activation = Activation::kTanh,
                                                           .kernel_initializer = normal(3),
                                                           .bias_initializer = normal(4),
                                                           .kernel_layout = c.kernel,
                                                           .bias_layout = layout({kNone})});
      floatx.reset();
      dense->build_standalone({4, 8});
      dense->enable_lora(kRank, kAlpha, normal(5), normal(6));
      EXPECT_EQ(dense->lora_kernel_a()->dtype(), dtype);
      check_layer(*dense, {4, 8}, c.x, dtype,
                  [](const Params& q) { return dense_reference(q, 4, 8, 6); });
    }
  }
}

TEST_F(LoraTest, Conv2DWeightsAreKeras) {
  auto conv = std::make_shared<Conv2D>(kFilters);
  EXPECT_THROW(conv->enable_lora(2), ValueError);  // not built
  conv->build_standalone(kImages);
  conv->enable_lora(3, 6.0);
  EXPECT_EQ(conv->lora_kernel_a()->path(), "conv2d/lora_kernel_a");
  EXPECT_EQ(conv->lora_kernel_b()->path(), "conv2d/lora_kernel_b");
  EXPECT_EQ(conv->lora_kernel_a()->shape(), (Shape{3, 3, 3, 3}));   // kernel.shape[:-1] + (rank,)
  EXPECT_EQ(conv->lora_kernel_b()->shape(), (Shape{3, kFilters}));  // (rank, filters)
  EXPECT_EQ(conv->lora().scale(), 2.0);
  EXPECT_FALSE(conv->kernel()->trainable());
  for (double v : gathered_f64(conv->lora_kernel_b()->value())) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(conv->enable_lora(3), ValueError);
}

TEST_F(LoraTest, Conv2DForwardAndGradientsUnderShardedLayouts) {
  struct Case {
    TensorLayout x, kernel;
  };
  const std::vector<Case> cases = {
      {layout({kNone, kNone, kNone, kNone}), layout({kNone, kNone, kNone, kNone})},
      {layout({{"data"}, kNone, kNone, kNone}), layout({kNone, kNone, kNone, {"model"}})},
      {layout({{"data"}, {"model"}, kNone, kNone}), layout({kNone, kNone, {"model"}, kNone})},
  };
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} x {} kernel {}", dtype_name(dtype), c.x.to_string(),
                               c.kernel.to_string()));
      clear_session();
      std::optional<FloatxScope> floatx(dtype);
      auto conv = std::make_shared<Conv2D>(kFilters, Conv2DOptions{.padding = "same",
                                                                   .kernel_initializer = normal(3),
                                                                   .bias_initializer = normal(4),
                                                                   .kernel_layout = c.kernel,
                                                                   .bias_layout = layout({kNone})});
      floatx.reset();
      conv->build_standalone(kImages);
      conv->enable_lora(kRank, kAlpha, normal(5), normal(6));
      check_layer(*conv, kImages, c.x, dtype, conv_reference);
    }
  }
}

// Keras creates A and B under the current distribution: their paths key the rules.
TEST_F(LoraTest, ModelParallelLaysOutTheLoraWeightsByTheirPaths) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map["dense/kernel"] = {None, "model"};
  map["dense/lora_kernel_a"] = {"model", None};
  map["dense/lora_kernel_b"] = {None, "model"};
  map["conv2d/kernel"] = {None, None, None, "model"};
  map["conv2d/lora_kernel_b"] = {None, "model"};
  auto mp = std::make_shared<ModelParallel>(map);
  DistributionScope scope = mp->scope();
  auto dense = std::make_shared<Dense>(8, DenseOptions{.activation = Activation::kTanh,
                                                       .kernel_initializer = normal(3),
                                                       .bias_initializer = normal(4)});
  dense->build_standalone({4, 8});
  dense->enable_lora(kRank, kAlpha, normal(5), normal(6));
  EXPECT_EQ(dense->kernel()->layout(), layout({kNone, {"model"}}));
  EXPECT_EQ(dense->lora_kernel_a()->layout(), layout({{"model"}, kNone}));
  EXPECT_EQ(dense->lora_kernel_b()->layout(), layout({kNone, {"model"}}));
  check_layer(*dense, {4, 8}, layout({{"data"}, kNone}), DType::kF32,
              [](const Params& q) { return dense_reference(q, 4, 8, 8); });

  auto conv = std::make_shared<Conv2D>(kFilters, Conv2DOptions{.padding = "same",
                                                               .kernel_initializer = normal(3),
                                                               .bias_initializer = normal(4)});
  conv->build_standalone(kImages);
  conv->enable_lora(kRank, kAlpha, normal(5), normal(6));
  EXPECT_EQ(conv->lora_kernel_a()->layout(),
            layout({kNone, kNone, kNone, kNone}));  // no rule: replicated
  EXPECT_EQ(conv->lora_kernel_b()->layout(), layout({kNone, {"model"}}));
  check_layer(*conv, kImages, layout({{"data"}, kNone, kNone, kNone}), DType::kF32, conv_reference);
}

}  // namespace
}  // namespace meshlayout
