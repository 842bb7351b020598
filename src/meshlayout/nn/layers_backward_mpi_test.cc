// Layer backward passes under mpirun (np 2 and 4): a column-parallel and a row-parallel Dense
// with the batch over 'data', and a vocab-parallel Embedding with tokens over 'data'; every
// process checks the gathered gradients against float64 central differences of a float64
// reference, and that each gradient is in its variable's layout with only local shards.
// BatchNormalization in training mode with the batch over 'data': global statistics.
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/layout/devices.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/core/embedding.h"
#include "meshlayout/nn/layers/normalization/batch_normalization.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;

DeviceMesh mesh_of_all() {
  auto rt = default_runtime();
  return DeviceMesh({2, rt->global_device_count() / 2}, {"data", "model"});
}

void expect_local(const Array& a) {
  for (const Array::Shard& s : a.local_shards())
    EXPECT_TRUE(default_runtime()->is_local(s.device_id));
}

void check_dense(const DeviceMesh& mesh, const TensorLayout& x_layout,
                 const TensorLayout& kernel_layout, const TensorLayout& bias_layout) {
  SCOPED_TRACE("x " + x_layout.to_string() + " kernel " + kernel_layout.to_string());
  clear_session();
  const Shape x_shape{4, 3, 8};
  auto dense = std::make_shared<Dense>(
      6, DenseOptions{.activation = Activation::kGelu,
                      .kernel_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 1}),
                      .bias_initializer = Initializer::random_normal({.stddev = 0.5, .seed = 2}),
                      .kernel_layout = kernel_layout,
                      .bias_layout = bias_layout});
  const std::vector<double> xv = testing::random_values(x_shape, 3);
  const Array x = distribute_tensor(testing::to_f32(x_shape, xv), x_layout);
  const Tensor y = (*dense)(Tensor(distribute_tensor(x, x.layout())));
  const std::vector<double> w = testing::random_values(y.shape(), 4);
  const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
  Params p{{"x", xv},
           {"kernel", gathered_f64(dense->kernel()->value())},
           {"bias", gathered_f64(dense->bias()->value())}};
  auto forward = [](const Params& q) {
    std::vector<double> out;
    for (int64_t r = 0; r < 12; ++r) {
      for (int64_t o = 0; o < 6; ++o) {
        double s = q.at("bias")[o];
        for (int64_t i = 0; i < 8; ++i) s += q.at("x")[r * 8 + i] * q.at("kernel")[i * 6 + o];
        out.push_back(0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0))));
      }
    }
    return out;
  };
  Gradients grads;
  const Array dx = dense->backward(x, dy, grads);
  EXPECT_EQ(dx.layout(), x.layout());
  expect_local(dx);
  expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
  for (const auto& [v, name] :
       {std::pair{dense->kernel(), "kernel"}, std::pair{dense->bias(), "bias"}}) {
    const Array* g = grads.find(*v);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(g->layout(), v->value().layout()) << name;
    expect_local(*g);
    expect_close(gathered_f64(*g), numeric_gradient(forward, p, name, w), std::string("d ") + name);
  }
  (void)mesh;
}

TEST(LayersBackwardMpiTest, DenseColumnAndRowParallel) {
  const DeviceMesh mesh = mesh_of_all();
  auto l = [&](std::vector<DimSharding> axes) { return TensorLayout(std::move(axes), mesh); };
  check_dense(mesh, l({{"data"}, kNone, kNone}), l({kNone, {"model"}}), l({{"model"}}));
  check_dense(mesh, l({{"data"}, kNone, {"model"}}), l({{"model"}, kNone}), l({kNone}));
  check_dense(mesh, l({{"model"}, kNone, kNone}), l({{"data"}, {"model"}}), l({{"data"}}));
}

TEST(LayersBackwardMpiTest, VocabParallelEmbedding) {
  const DeviceMesh mesh = mesh_of_all();
  for (const TensorLayout& table :
       {TensorLayout({{"model"}, kNone}, mesh), TensorLayout({{"data", "model"}, kNone}, mesh),
        TensorLayout({kNone, {"model"}}, mesh)}) {
    SCOPED_TRACE(table.to_string());
    clear_session();
    const int64_t vocab = 13, dim = 4;
    auto emb =
        std::make_shared<Embedding>(vocab, dim, EmbeddingOptions{.embeddings_layout = table});
    HostTensor ids(DType::kI32, {4, 6});
    for (int64_t i = 0; i < ids.num_elements(); ++i)
      ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 5 + 1) % 11);
    const Array tokens = distribute_tensor(ids, TensorLayout({{"data"}, kNone}, mesh));
    const Tensor y = (*emb)(Tensor(distribute_tensor(tokens, tokens.layout())));
    const std::vector<double> w = testing::random_values(y.shape(), 5);
    const Array dy = distribute_tensor(testing::to_f32(y.shape(), w), y.value().layout());
    Params p{{"table", gathered_f64(emb->embeddings()->value())}};
    auto forward = [&](const Params& q) {
      std::vector<double> out;
      for (int64_t t = 0; t < ids.num_elements(); ++t) {
        for (int64_t c = 0; c < dim; ++c)
          out.push_back(q.at("table")[static_cast<size_t>(ids.data_as<int32_t>()[t] * dim + c)]);
      }
      return out;
    };
    Gradients grads;
    (void)emb->backward(tokens, dy, grads);
    const Array* g = grads.find(*emb->embeddings());
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->layout(), table);
    expect_local(*g);
    expect_close(gathered_f64(*g), numeric_gradient(forward, p, "table", w), "d embeddings");
  }
}

// BatchNormalization in training mode with the batch over 'data' (across processes): the
// statistics, dx through them, d gamma / d beta and the moving-mean update are those of the
// global batch.
TEST(LayersBackwardMpiTest, BatchNormalizationTrainingStatisticsAcrossProcesses) {
  const DeviceMesh mesh = mesh_of_all();
  auto l = [&](std::vector<DimSharding> axes) { return TensorLayout(std::move(axes), mesh); };
  for (const auto& [x_layout, w_layout] :
       {std::pair{l({{"data"}, kNone, kNone}), l({{"model"}})},
        std::pair{l({{"data"}, kNone, {"model"}}), l({kNone})},
        std::pair{l({{"data", "model"}, kNone, kNone}), l({{"data"}})}}) {
    SCOPED_TRACE("x " + x_layout.to_string() + " weights " + w_layout.to_string());
    clear_session();
    const int64_t F = 4;
    const Shape shape{8, 3, F};
    auto bn = std::make_shared<BatchNormalization>(BatchNormalizationOptions{
        .epsilon = 1e-3,
        .momentum = 0.5,
        .beta_initializer = Initializer::random_normal({.stddev = 0.3, .seed = 1}),
        .gamma_initializer = Initializer::random_normal({.mean = 1.0, .stddev = 0.3, .seed = 2}),
        .beta_layout = w_layout,
        .gamma_layout = w_layout,
        .moving_mean_layout = w_layout,
        .moving_variance_layout = w_layout});
    bn->set_training(true);
    std::vector<double> xv = testing::random_values(shape, 7);
    for (size_t i = 0; i < xv.size(); ++i)
      xv[i] = static_cast<float>(xv[i] + 0.2 * static_cast<double>(i / 12));
    const Array x = distribute_tensor(testing::to_f32(shape, xv), x_layout);
    const Tensor y = (*bn)(Tensor(distribute_tensor(x, x.layout())));
    auto forward = [F](const Params& q) {
      const std::vector<double>& v = q.at("x");
      const size_t n = v.size() / F;
      std::vector<double> mean(F), var(F), out(v.size());
      for (size_t k = 0; k < v.size(); ++k) mean[k % F] += v[k] / static_cast<double>(n);
      for (size_t k = 0; k < v.size(); ++k)
        var[k % F] += (v[k] - mean[k % F]) * (v[k] - mean[k % F]) / static_cast<double>(n);
      for (size_t k = 0; k < v.size(); ++k) {
        out[k] = (v[k] - mean[k % F]) / std::sqrt(var[k % F] + 1e-3) * q.at("gamma")[k % F] +
                 q.at("beta")[k % F];
      }
      return out;
    };
    Params p{{"x", xv},
             {"gamma", gathered_f64(bn->gamma()->value())},
             {"beta", gathered_f64(bn->beta()->value())}};
    expect_close(gathered_f64(y.value()), forward(p), "forward y");
    std::vector<double> want_mean(F);  // 0.5 × 0 + 0.5 × the global batch mean
    for (size_t k = 0; k < xv.size(); ++k)
      want_mean[k % F] += 0.5 * xv[k] / static_cast<double>(xv.size() / F);
    expect_close(gathered_f64(bn->moving_mean()->value()), want_mean, "moving_mean", 1e-5);
    const std::vector<double> w = testing::random_values(shape, 8);
    const Array dy = distribute_tensor(testing::to_f32(shape, w), y.value().layout());
    Gradients grads;
    const Array dx = bn->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_local(dx);
    expect_close(gathered_f64(dx), numeric_gradient(forward, p, "x", w), "dx");
    EXPECT_EQ(grads.size(), 2u);
    for (const auto& [v, name] : {std::pair{bn->gamma(), "gamma"}, std::pair{bn->beta(), "beta"}}) {
      const Array* g = grads.find(*v);
      ASSERT_NE(g, nullptr) << name;
      EXPECT_EQ(g->layout(), v->value().layout()) << name;
      expect_local(*g);
      expect_close(gathered_f64(*g), numeric_gradient(forward, p, name, w),
                   std::string("d ") + name);
    }
  }
}

}  // namespace
}  // namespace meshlayout
