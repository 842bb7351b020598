// The transformer layers — EinsumDense (with LoRA), RMSNormalization, MultiHeadAttention with
// grouped key/value heads, rotary embedding and a key/value cache — against float64 references
// written from the formulas, on Megatron, 2-D and uneven-head layouts; their Keras paths.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"
#include "meshlayout/nn/layers/core/einsum_dense.h"
#include "meshlayout/nn/layers/normalization/rms_normalization.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/nn/transformer_reference.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::ref_causal_attention;
using testing::ref_matmul;
using testing::ref_rope;
using testing::ValueErrorMessage;
using testing::Vec;

class TransformerLayersTest : public NnTest {};

Vec doubles(const HostTensor& t) {
  const float* p = t.data_as<float>();
  return Vec(p, p + num_elements(t.shape()));
}

void expect_close(const HostTensor& got, const Vec& want, double tol, const std::string& what) {
  const Vec g = doubles(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LE(worst, tol * std::max(1.0, scale)) << what;
}

// Causal grouped-query self-attention of x (B, T, d) in double, no biases.
Vec reference_attention(const Vec& x, const MultiHeadAttention& m, int64_t B, int64_t T, int64_t d,
                        int64_t H, int64_t Hkv, int64_t D, double theta) {
  Vec q = ref_matmul(x, doubles(m.query()->kernel()->value().gather()), B * T, d, H * D);
  Vec k = ref_matmul(x, doubles(m.key()->kernel()->value().gather()), B * T, d, Hkv * D);
  const Vec v = ref_matmul(x, doubles(m.value()->kernel()->value().gather()), B * T, d, Hkv * D);
  if (theta > 0) {
    ref_rope(q, B, T, H, D, 0, theta);
    ref_rope(k, B, T, Hkv, D, 0, theta);
  }
  const Vec o = ref_causal_attention(q, k, v, B, T, H, Hkv, D);
  return ref_matmul(o, doubles(m.attention_output()->kernel()->value().gather()), B * T, H * D, d);
}

struct AttentionCase {
  int64_t heads, kv_heads;
  std::vector<std::pair<std::string, TensorLayout>> rules;
  std::string what;
};

TEST_F(TransformerLayersTest, GroupedQueryAttentionMatchesFloat64OnEveryLayout) {
  const int64_t B = 2, T = 5, d = 16, D = 4;
  const AttentionCase cases[] = {
      {8, 8, {}, "replicated MHA"},
      {8,
       2,
       {{"query.kernel|key.kernel|value.kernel", TensorLayout({None, "model", None})},
        {"attention_output.kernel", TensorLayout({"model", None, None})}},
       "Megatron, 2 KV heads on 4"},
      {8,
       4,
       {{"query.kernel|key.kernel|value.kernel", TensorLayout({None, "model", None})},
        {"attention_output.kernel", TensorLayout({"model", None, None})}},
       "Megatron GQA"},
      {8,
       4,
       {{"query.kernel|key.kernel|value.kernel", TensorLayout({"model", "data", None})},
        {"attention_output.kernel", TensorLayout({"model", None, "data"})}},
       "keras-hub 2-D"},
      {6,
       3,
       {{"query.kernel|key.kernel|value.kernel", TensorLayout({None, "model", None})},
        {"attention_output.kernel", TensorLayout({"model", None, None})}},
       "uneven heads (6, 3 on 4)"},
  };
  const HostTensor xh = HostTensor::random(DType::kF32, {B, T, d}, 3);
  for (const AttentionCase& c : cases) {
    for (const double theta : {0.0, 10000.0}) {
      clear_session();
      LayoutMap rules(mesh_);
      for (const auto& [pattern, layout] : c.rules) rules[pattern] = layout;
      std::shared_ptr<MultiHeadAttention> attn;
      std::shared_ptr<Model> model;
      {
        LayoutMapScope scope = rules.scope();
        Tensor in = Input({T, d}, B);
        attn = std::make_shared<MultiHeadAttention>(
            MultiHeadAttentionOptions{.num_heads = c.heads,
                                      .key_dim = D,
                                      .num_key_value_heads = c.kv_heads,
                                      .use_bias = false,
                                      .rope_theta = theta});
        model = Model::functional(in, (*attn)(in));
      }
      const Tensor y = (*model)(distribute_tensor(xh, TensorLayout({"data", None, None}, mesh_)));
      expect_close(y.value().gather(),
                   reference_attention(doubles(xh), *attn, B, T, d, c.heads, c.kv_heads, D, theta),
                   1e-5, fmt::format("{} theta {}", c.what, theta));
    }
  }
}

TEST_F(TransformerLayersTest, CachedStepsGiveTheFullCausalResult) {
  const int64_t B = 2, T = 6, d = 16;
  LayoutMap rules(mesh_);
  rules["query.kernel|key.kernel|value.kernel"] = {None, "model", None};
  rules["attention_output.kernel"] = {"model", None, None};
  std::shared_ptr<MultiHeadAttention> attn;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({T, d}, B);
    attn = std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{.num_heads = 4,
                                                                          .key_dim = 4,
                                                                          .num_key_value_heads = 2,
                                                                          .use_bias = true,
                                                                          .rope_theta = 500.0});
    (void)Model::functional(in, (*attn)(in));
  }
  const HostTensor xh = HostTensor::random(DType::kF32, {B, T, d}, 8);
  const TensorLayout layout({"data", None, None}, mesh_);
  const Vec full = doubles(attn->call_on(distribute_tensor(xh, layout)).gather());
  // A prompt of 4, then one position at a time.
  KVCache cache;
  std::vector<HostTensor> parts;
  const auto rows = [&](int64_t from, int64_t to) {
    HostTensor part(DType::kF32, {B, to - from, d});
    for (int64_t b = 0; b < B; ++b) {
      std::copy(xh.data_as<float>() + (b * T + from) * d, xh.data_as<float>() + (b * T + to) * d,
                part.data_as<float>() + b * (to - from) * d);
    }
    return part;
  };
  Vec stepped(full.size());
  int64_t at = 0;
  for (const int64_t n : {4, 1, 1}) {
    const Vec y = doubles(
        attn->call_cached(distribute_tensor(rows(at, at + n), layout), cache, at, T).gather());
    for (int64_t b = 0; b < B; ++b) {
      std::copy(y.begin() + b * n * d, y.begin() + (b + 1) * n * d,
                stepped.begin() + (b * T + at) * d);
    }
    at += n;
  }
  EXPECT_EQ(cache.length, T);
  EXPECT_EQ(cache.key->layout(),
            TensorLayout({"data", None, None, None}, mesh_));  // 2 KV heads on 4: whole
  HostTensor got(DType::kF32, {B, T, d});
  std::copy(stepped.begin(), stepped.end(), got.data_as<float>());
  expect_close(got, full, 1e-5, "cached");
  EXPECT_THROW((void)attn->call_cached(distribute_tensor(rows(0, 1), layout), cache, T, T),
               ValueError);
}

// Left padding (KVCache::padding, for batched generation): row 0 padded by 2 slots gives, at
// its real slots, what its 4 tokens give alone; row 1, unpadded, what it gives alone; cached
// steps continue both. A padding of the wrong length or past max_length is refused.
TEST_F(TransformerLayersTest, PaddedCacheRowsEqualEachRowAlone) {
  const int64_t T = 6, d = 16;
  LayoutMap rules(mesh_);
  rules["query.kernel|key.kernel|value.kernel"] = {None, "model", None};
  rules["attention_output.kernel"] = {"model", None, None};
  std::shared_ptr<MultiHeadAttention> attn;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({T, d}, 2);
    attn = std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{.num_heads = 4,
                                                                          .key_dim = 4,
                                                                          .num_key_value_heads = 2,
                                                                          .use_bias = true,
                                                                          .rope_theta = 500.0,
                                                                          .sliding_window = 3});
    (void)Model::functional(in, (*attn)(in));
  }
  const HostTensor xh = HostTensor::random(DType::kF32, {2, T, d}, 9);
  const TensorLayout layout({"data", None, None}, mesh_);
  const auto slice = [&](int64_t b, int64_t from, int64_t to) {  // rows b, slots [from, to)
    HostTensor part(DType::kF32, {1, to - from, d});
    std::copy(xh.data_as<float>() + (b * T + from) * d, xh.data_as<float>() + (b * T + to) * d,
              part.data_as<float>());
    return part;
  };
  const auto both = [&](int64_t from, int64_t to) {
    HostTensor part(DType::kF32, {2, to - from, d});
    for (int64_t b = 0; b < 2; ++b) {
      std::copy(xh.data_as<float>() + (b * T + from) * d, xh.data_as<float>() + (b * T + to) * d,
                part.data_as<float>() + b * (to - from) * d);
    }
    return part;
  };
  const TensorLayout one({None, None, None}, mesh_);
  const Vec alone0 = doubles(attn->call_on(distribute_tensor(slice(0, 2, T), one)).gather());
  const Vec alone1 = doubles(attn->call_on(distribute_tensor(slice(1, 0, T), one)).gather());
  KVCache cache{.padding = {2, 0}};
  Vec got0, got1;
  int64_t at = 0;
  for (const int64_t n : {4, 1, 1}) {
    const Vec y = doubles(
        attn->call_cached(distribute_tensor(both(at, at + n), layout), cache, at, T).gather());
    for (int64_t t = 0; t < n; ++t) {
      if (at + t >= 2) got0.insert(got0.end(), y.begin() + t * d, y.begin() + (t + 1) * d);
      got1.insert(got1.end(), y.begin() + (n + t) * d, y.begin() + (n + t + 1) * d);
    }
    at += n;
  }
  const auto close = [](const Vec& got, const Vec& want) {
    HostTensor g(DType::kF32, {static_cast<int64_t>(got.size())});
    std::copy(got.begin(), got.end(), g.data_as<float>());
    return std::make_pair(g, want);
  };
  const auto [g0, w0] = close(got0, alone0);
  expect_close(g0, w0, 1e-5, "row 0, padded by 2");
  const auto [g1, w1] = close(got1, alone1);
  expect_close(g1, w1, 1e-5, "row 1");
  ASSERT_TRUE(cache.key_mask.has_value());
  const HostTensor mask = cache.key_mask->gather();
  EXPECT_EQ(mask.data_as<uint8_t>()[1], 0);
  EXPECT_EQ(mask.data_as<uint8_t>()[2], 1);
  KVCache short_padding{.padding = {1}};
  EXPECT_TRUE(testing::HasSubstr(ValueErrorMessage([&] {
                                   (void)attn->call_cached(distribute_tensor(both(0, 2), layout),
                                                           short_padding, 0, T);
                                 }),
                                 "the cache's padding has 1 rows, the batch 2"));
  KVCache too_long{.padding = {6, 0}};
  EXPECT_TRUE(testing::HasSubstr(ValueErrorMessage([&] {
                                   (void)attn->call_cached(distribute_tensor(both(0, 2), layout),
                                                           too_long, 0, T);
                                 }),
                                 "a row's padding must be in [0, 6) (max_length), got 6"));
}

TEST_F(TransformerLayersTest, KerasPathsAndShapes) {
  std::shared_ptr<Model> model;
  LayoutMap rules(mesh_);
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({3, 10}, 2);
    auto attn = std::make_shared<MultiHeadAttention>(
        MultiHeadAttentionOptions{.num_heads = 2, .key_dim = 4});
    auto norm = std::make_shared<RMSNormalization>();
    model = Model::functional(in, (*norm)((*attn)(in)));
  }
  std::vector<std::string> paths, keys;
  std::vector<Shape> shapes;
  for (const VariablePtr& v : model->variables()) {
    paths.push_back(v->path());
    keys.push_back(v->object_path());
    shapes.push_back(v->shape());
  }
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "multi_head_attention/query/kernel", "multi_head_attention/query/bias",
                       "multi_head_attention/key/kernel", "multi_head_attention/key/bias",
                       "multi_head_attention/value/kernel", "multi_head_attention/value/bias",
                       "multi_head_attention/attention_output/kernel",
                       "multi_head_attention/attention_output/bias", "rms_normalization/scale"}));
  EXPECT_EQ(keys[0], "multi_head_attention._query_dense.kernel");
  EXPECT_EQ(keys[6], "multi_head_attention._output_dense.kernel");
  EXPECT_EQ(
      shapes,
      (std::vector<Shape>{
          {10, 2, 4}, {2, 4}, {10, 2, 4}, {2, 4}, {10, 2, 4}, {2, 4}, {2, 4, 10}, {10}, {10}}));
}

TEST_F(TransformerLayersTest, EinsumDenseAndLoraMatchFloat64) {
  const HostTensor xh = HostTensor::random(DType::kF32, {4, 3, 8}, 5);
  for (const TensorLayout& kernel_layout :
       {TensorLayout({None, "model", None}), TensorLayout({"model", "data", None}),
        TensorLayout({None, None, "model"})}) {
    clear_session();
    LayoutMap rules(mesh_);
    rules["kernel"] = kernel_layout;
    std::shared_ptr<EinsumDense> dense;
    {
      LayoutMapScope scope = rules.scope();
      Tensor in = Input({3, 8}, 4);
      dense = std::make_shared<EinsumDense>("btd,dnh->btnh", Shape{-1, 3, 2},
                                            EinsumDenseOptions{.bias_axes = "nh"});
      (void)Model::functional(in, (*dense)(in));
    }
    EXPECT_EQ(dense->kernel()->path(), "einsum_dense/kernel");
    EXPECT_EQ(dense->bias()->shape(), (Shape{3, 2}));
    const Array x = distribute_tensor(xh, TensorLayout({"data", None, None}, mesh_));
    Vec want = ref_matmul(doubles(xh), doubles(dense->kernel()->value().gather()), 12, 8, 6);
    expect_close(dense->call_on(x).gather(), want, 1e-6, kernel_layout.to_string());

    dense->enable_lora(2, 4.0, Initializer::he_uniform(), Initializer::random_normal());
    EXPECT_EQ(dense->lora_kernel_a()->path(), "einsum_dense/lora_kernel_a");
    EXPECT_EQ(dense->lora_kernel_a()->shape(), (Shape{8, 3, 2}));
    EXPECT_EQ(dense->lora_kernel_b()->shape(), (Shape{2, 2}));
    EXPECT_FALSE(dense->kernel()->trainable());
    const Vec ab = ref_matmul(doubles(dense->lora_kernel_a()->value().gather()),
                              doubles(dense->lora_kernel_b()->value().gather()), 24, 2, 2);
    Vec w = doubles(dense->kernel()->value().gather());
    for (size_t i = 0; i < w.size(); ++i) w[i] += 2.0 * ab[i];  // alpha / rank = 4 / 2
    want = ref_matmul(doubles(xh), w, 12, 8, 6);
    expect_close(dense->call_on(x).gather(), want, 1e-5, "lora " + kernel_layout.to_string());
    EXPECT_THROW(dense->enable_lora(2), ValueError);
  }
  EXPECT_THROW(EinsumDense("ab,cd->ad", {4}), ValueError);
  EXPECT_NE(ValueErrorMessage([] {
              EinsumDense("btd,dnh->bnth", {-1, 2, 2});
            }).find("'btd,dnh->bnth'"),
            std::string::npos);
  auto unbuilt = std::make_shared<EinsumDense>("ab,bc->ac", Shape{4});
  EXPECT_NE(ValueErrorMessage([&] { unbuilt->enable_lora(2); }).find("built first"),
            std::string::npos);
}

TEST_F(TransformerLayersTest, RmsNormalizationMatchesFloat64) {
  const HostTensor xh = HostTensor::random(DType::kF32, {4, 6}, 2);
  for (const TensorLayout& l :
       {TensorLayout({"data", "model"}, mesh_), TensorLayout({None, None}, mesh_)}) {
    clear_session();
    auto norm = std::make_shared<RMSNormalization>(RMSNormalizationOptions{
        .epsilon = 1e-5, .scale_initializer = Initializer::random_normal()});
    {
      LayoutMap rules(mesh_);
      LayoutMapScope scope = rules.scope();
      Tensor in = Input({6}, 4);
      (void)Model::functional(in, (*norm)(in));
    }
    const Array y = norm->call_on(distribute_tensor(xh, l));
    const Vec x = doubles(xh), g = doubles(norm->scale()->value().gather());
    Vec want(x.size());
    for (int r = 0; r < 4; ++r) {
      double ss = 0;
      for (int c = 0; c < 6; ++c)
        ss += x[static_cast<size_t>(r * 6 + c)] * x[static_cast<size_t>(r * 6 + c)];
      for (int c = 0; c < 6; ++c) {
        want[static_cast<size_t>(r * 6 + c)] = x[static_cast<size_t>(r * 6 + c)] /
                                               std::sqrt(ss / 6 + 1e-5) * g[static_cast<size_t>(c)];
      }
    }
    expect_close(y.gather(), want, 1e-6, l.to_string());
  }
  EXPECT_THROW(RMSNormalization({.epsilon = -1}), ValueError);
}

}  // namespace
}  // namespace meshlayout
