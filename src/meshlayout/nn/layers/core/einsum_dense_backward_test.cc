// EinsumDense::backward against float64 central differences of a float64 reference of the
// forward, y[p, o] = act(Σ_c x[p, c]·W[c, o] + bias[o mod |bias|]), W = kernel (+ s·A@B with
// LoRA), for keras-hub's equations under replicated, batch-split, column- and row-parallel and
// 2-D layouts on the 2x4 mesh; every gradient in its variable's layout, dx in x's.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/layers/core/einsum_dense.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

double gelu(double z) { return 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0))); }

struct EinsumCase {
  std::string equation;
  Shape output_shape;
  std::string bias_axes;
  Shape x_shape;
  TensorLayout x_layout, kernel_layout, bias_layout;
  Activation activation = Activation::kLinear;
  bool lora = false;
};

class EinsumDenseBackwardTest : public NnTest {
 protected:
  void check(const EinsumCase& c) {
    SCOPED_TRACE(c.equation + " x " + c.x_layout.to_string() + " kernel " +
                 c.kernel_layout.to_string() + (c.lora ? " lora" : ""));
    auto layer = std::make_shared<EinsumDense>(
        c.equation, c.output_shape,
        EinsumDenseOptions{
            .bias_axes = c.bias_axes,
            .activation = c.activation,
            .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 3}),
            .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 4}),
            .kernel_layout = c.kernel_layout,
            .bias_layout = c.bias_layout});
    const std::vector<double> xv = testing::random_values(c.x_shape, 11);
    const Array x = distribute_tensor(testing::to_f32(c.x_shape, xv), c.x_layout);
    (void)(*layer)(Tensor(distribute_tensor(x, x.layout())));  // builds
    const double lora_scale = 3.0 / 2.0;
    if (c.lora) {
      layer->enable_lora(2, 3.0, Initializer::random_normal({.stddev = 0.5, .seed = 5}),
                         Initializer::random_normal({.stddev = 0.5, .seed = 6}));
    }
    const Tensor y_tensor = (*layer)(Tensor(distribute_tensor(x, x.layout())));
    const Array& y = y_tensor.value();
    const std::vector<double> w = testing::random_values(y.shape(), 12);
    const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.layout());

    Params p{{"x", xv}, {"kernel", gathered_f64(layer->kernel()->value())}};
    if (layer->bias()) p["bias"] = gathered_f64(layer->bias()->value());
    if (c.lora) {
      p["a"] = gathered_f64(layer->lora_kernel_a()->value());
      p["b"] = gathered_f64(layer->lora_kernel_b()->value());
    }
    const Shape& ks = layer->kernel()->shape();
    const int64_t n_last = ks.back(), kernel_size = num_elements(ks);
    const int64_t kc = contracted_size(c, ks);
    const int64_t n = kernel_size / kc, rows = num_elements(c.x_shape) / kc;
    const int64_t bias_size = layer->bias() ? num_elements(layer->bias()->shape()) : 1;
    auto forward = [&](const Params& q) {
      std::vector<double> kernel = q.at("kernel");
      if (c.lora) {  // kernel (R, n_last) += s · A (R, r) @ B (r, n_last)
        const std::vector<double>& a = q.at("a");
        const std::vector<double>& b = q.at("b");
        for (int64_t i = 0; i < kernel_size / n_last; ++i) {
          for (int64_t j = 0; j < n_last; ++j) {
            for (int64_t r = 0; r < 2; ++r)
              kernel[i * n_last + j] += lora_scale * a[i * 2 + r] * b[r * n_last + j];
          }
        }
      }
      const std::vector<double>& xq = q.at("x");
      std::vector<double> out(static_cast<size_t>(rows * n));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < n; ++o) {
          double s = layer->bias() ? q.at("bias")[o % bias_size] : 0.0;
          for (int64_t k = 0; k < kc; ++k) s += xq[r * kc + k] * kernel[k * n + o];
          out[r * n + o] = c.activation == Activation::kGelu ? gelu(s) : s;
        }
      }
      return out;
    };
    expect_close(gathered_f64(y), forward(p), "forward y");

    Gradients grads;
    const Array dx = layer->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
    std::vector<std::pair<VariablePtr, std::string>> vars{{layer->bias(), "bias"}};
    if (c.lora) {
      EXPECT_EQ(grads.find(*layer->kernel()), nullptr) << "the frozen kernel got a gradient";
      vars.emplace_back(layer->lora_kernel_a(), "a");
      vars.emplace_back(layer->lora_kernel_b(), "b");
    } else {
      vars.emplace_back(layer->kernel(), "kernel");
    }
    std::erase_if(vars, [](const auto& v) { return v.first == nullptr; });
    testing::expect_weight_gradients(grads, vars, forward, p, w);
  }

  // The product of the kernel's leading dims that the input contracts (its trailing ones).
  static int64_t contracted_size(const EinsumCase& c, const Shape& ks) {
    const size_t comma = c.equation.find(','), arrow = c.equation.find("->");
    std::string in = c.equation.substr(0, comma),
                kernel = c.equation.substr(comma + 1, arrow - comma - 1);
    int64_t k = 1;
    for (size_t i = 0; i < kernel.size(); ++i) {
      if (in.find(kernel[i]) != std::string::npos) k *= ks[i];
    }
    return k;
  }

  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }
};

const DimSharding kNone;

TEST_F(EinsumDenseBackwardTest, QueryProjectionUnderEveryLayout) {
  // btd,dnh->btnh: x (2, 3, 8), kernel (8, 4, 2), bias (4, 2).
  const EinsumCase base{.equation = "btd,dnh->btnh",
                        .output_shape = {-1, 4, 2},
                        .bias_axes = "nh",
                        .x_shape = {2, 3, 8},
                        .x_layout = layout({kNone, kNone, kNone}),
                        .kernel_layout = layout({kNone, kNone, kNone}),
                        .bias_layout = layout({kNone, kNone})};
  check(base);  // replicated
  EinsumCase batch = base;
  batch.x_layout = layout({{"data"}, kNone, kNone});
  check(batch);
  EinsumCase column = batch;  // heads split: column-parallel
  column.kernel_layout = layout({kNone, {"model"}, kNone});
  column.bias_layout = layout({{"model"}, kNone});
  column.activation = Activation::kGelu;
  check(column);
  EinsumCase two_d = column;  // x split on d too (contracted)
  two_d.x_layout = layout({{"data"}, kNone, {"model"}});
  two_d.kernel_layout = layout({{"data"}, {"model"}, kNone});
  check(two_d);
}

// Gemma's query projection, "btd,ndh->btnh": the kernel stored (heads, d, head_dim) as
// keras-hub's GemmaBackbone has it, split as its get_layout_map says ((model, batch, None)) and
// in other layouts; forward and every gradient against a float64 reference of the equation
// itself, y[b,t,n,h] = Σ_d x[b,t,d]·K[n,d,h] + bias[n,h]; LoRA on such a kernel is refused.
TEST_F(EinsumDenseBackwardTest, GemmaKernelWithHeadsFirst) {
  const int64_t B = 2, T = 3, d = 8, N = 4, H = 2;
  const std::vector<std::vector<DimSharding>> kernel_layouts = {{kNone, kNone, kNone},
                                                                {{"model"}, {"data"}, kNone},
                                                                {kNone, {"model"}, kNone},
                                                                {{"data"}, kNone, {"model"}}};
  for (const auto& kl : kernel_layouts) {
    SCOPED_TRACE(layout(kl).to_string());
    auto layer = std::make_shared<EinsumDense>(
        "btd,ndh->btnh", Shape{-1, N, H},
        EinsumDenseOptions{
            .name = "query",
            .bias_axes = "nh",
            .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 3}),
            .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 4}),
            .kernel_layout = layout(kl),
            .bias_layout = layout({kl[0], kl[2]})});
    const Shape x_shape{B, T, d};
    const std::vector<double> xv = testing::random_values(x_shape, 11);
    const Array x =
        distribute_tensor(testing::to_f32(x_shape, xv), layout({{"data"}, kNone, kNone}));
    const Tensor y_tensor = (*layer)(Tensor(distribute_tensor(x, x.layout())));
    const Array& y = y_tensor.value();
    ASSERT_EQ(layer->kernel()->shape(), (Shape{N, d, H}));
    EXPECT_EQ(layer->kernel()->value().layout(), layout(kl));
    ASSERT_EQ(y.shape(), (Shape{B, T, N, H}));
    Params p{{"x", xv},
             {"kernel", gathered_f64(layer->kernel()->value())},
             {"bias", gathered_f64(layer->bias()->value())}};
    const auto forward = [&](const Params& q) {
      std::vector<double> out(static_cast<size_t>(B * T * N * H));
      for (int64_t r = 0; r < B * T; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t h = 0; h < H; ++h) {
            double acc = q.at("bias")[static_cast<size_t>(n * H + h)];
            for (int64_t k = 0; k < d; ++k) {
              acc += q.at("x")[static_cast<size_t>(r * d + k)] *
                     q.at("kernel")[static_cast<size_t>((n * d + k) * H + h)];
            }
            out[static_cast<size_t>((r * N + n) * H + h)] = acc;
          }
        }
      }
      return out;
    };
    expect_close(gathered_f64(y), forward(p), "forward y");
    const std::vector<double> w = testing::random_values(y.shape(), 12);
    const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.layout());
    Gradients grads;
    const Array dx = layer->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
    const Array* dk = grads.find(*layer->kernel());
    ASSERT_NE(dk, nullptr);
    EXPECT_EQ(dk->layout(), layer->kernel()->value().layout());
    testing::expect_weight_gradients(grads, {{layer->kernel(), "kernel"}, {layer->bias(), "bias"}},
                                     forward, p, w);
    EXPECT_THROW(layer->enable_lora(2), ValueError);
  }
  // Letters the output does not have are still refused, naming what is expected.
  try {
    EinsumDense("btd,ndh->btnx", Shape{-1, N, H});
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("followed by the kernel's letters 'nh' in some order"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(EinsumDenseBackwardTest, OutputProjectionRowParallel) {
  // btnh,nhd->btd: x (2, 3, 4, 2), kernel (4, 2, 8) split on heads: row-parallel.
  const EinsumCase c{.equation = "btnh,nhd->btd",
                     .output_shape = {-1, 8},
                     .bias_axes = "d",
                     .x_shape = {2, 3, 4, 2},
                     .x_layout = layout({{"data"}, kNone, {"model"}, kNone}),
                     .kernel_layout = layout({{"model"}, kNone, kNone}),
                     .bias_layout = layout({{"model"}})};
  check(c);
  EinsumCase replicated_x = c;
  replicated_x.x_layout = layout({kNone, kNone, kNone, kNone});
  replicated_x.activation = Activation::kGelu;
  check(replicated_x);
}

TEST_F(EinsumDenseBackwardTest, MatrixAndEllipsisEquations) {
  check({.equation = "ab,bc->ac",
         .output_shape = {6},
         .bias_axes = "c",
         .x_shape = {4, 5},
         .x_layout = layout({{"data"}, {"model"}}),
         .kernel_layout = layout({{"model"}, kNone}),
         .bias_layout = layout({kNone})});
  check({.equation = "...b,bc->...c",
         .output_shape = {6},
         .bias_axes = "",
         .x_shape = {2, 3, 5},
         .x_layout = layout({{"data"}, kNone, kNone}),
         .kernel_layout = layout({kNone, {"model"}}),
         .bias_layout = layout({kNone}),
         .activation = Activation::kGelu});
}

TEST_F(EinsumDenseBackwardTest, LoraTrainsAAndBAndFreezesTheKernel) {
  const EinsumCase c{.equation = "btd,dnh->btnh",
                     .output_shape = {-1, 4, 2},
                     .bias_axes = "nh",
                     .x_shape = {2, 3, 8},
                     .x_layout = layout({{"data"}, kNone, kNone}),
                     .kernel_layout = layout({kNone, {"model"}, kNone}),
                     .bias_layout = layout({{"model"}, kNone}),
                     .lora = true};
  check(c);
  EinsumCase row = {.equation = "btnh,nhd->btd",
                    .output_shape = {-1, 8},
                    .bias_axes = "",
                    .x_shape = {2, 3, 4, 2},
                    .x_layout = layout({{"data"}, kNone, {"model"}, kNone}),
                    .kernel_layout = layout({{"model"}, kNone, kNone}),
                    .bias_layout = layout({kNone}),
                    .activation = Activation::kGelu,
                    .lora = true};
  check(row);
}

TEST_F(EinsumDenseBackwardTest, RefusesDyOfAnotherShapeOrDtype) {
  auto layer = std::make_shared<EinsumDense>(
      "btd,dnh->btnh", Shape{-1, 4, 2},
      EinsumDenseOptions{.kernel_layout = layout({kNone, kNone, kNone})});
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {2, 3, 8}, 1),
                                    layout({kNone, kNone, kNone}));
  (void)(*layer)(Tensor(distribute_tensor(x, x.layout())));
  Gradients grads;
  const Array bad = distribute_tensor(HostTensor::random(DType::kF32, {2, 3, 4, 3}, 2),
                                      layout({kNone, kNone, kNone, kNone}));
  try {
    (void)layer->backward(x, bad, grads);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(2, 3, 4, 2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(2, 3, 4, 3)"), std::string::npos) << e.what();
  }
  const Array f64 = distribute_tensor(HostTensor::random(DType::kF64, {2, 3, 4, 2}, 2),
                                      layout({kNone, kNone, kNone, kNone}));
  EXPECT_THROW((void)layer->backward(x, f64, grads), ValueError);
}

TEST(EinsumDenseBackwardErrors, ReportMaxError) {
  std::printf("max relative gradient error: %.3g\n", testing::max_relative_error_seen());
}

}  // namespace
}  // namespace meshlayout
