// MultiHeadAttention::backward against float64 central differences of a float64 reference of
// the forward written from the formulas (q/k/v projections with biases, rotate-half RoPE,
// grouped-query softmax attention, causal or not, output projection), on mesh[data=2,model=4]
// with the batch on 'data': replicated, Megatron (q/k/v kernels column-parallel on heads, the
// output kernel row-parallel), grouped KV heads aligned with the split and replicated over it
// (2 KV heads on 4), keras-hub's 2-D kernels; dx and every weight's gradient, each in its layout.
// In float64 (the layer built under FloatxScope F64: EinsumDense projections, RoPE, attention
// and their backward in double) against a five-point stencil, to 1e-10.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/nn/transformer_reference.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;
using testing::ref_matmul;
using testing::ref_rope;
using testing::Vec;

struct Dims {
  int64_t B, T, d, H, Hkv, D;
};

void add_bias(Vec& y, const Vec& bias) {
  for (size_t i = 0; i < y.size(); ++i) y[i] += bias[i % bias.size()];
}

// softmax(q kᵀ / √D) v per query head (KV head h / (H / Hkv)), keys s <= t when causal, and
// s > t − window with a sliding window.
Vec ref_attention(const Vec& q, const Vec& k, const Vec& v, const Dims& z, bool causal,
                  int64_t window, double scale = 0, double cap = 0) {
  if (scale == 0) scale = 1 / std::sqrt(static_cast<double>(z.D));
  Vec o(static_cast<size_t>(z.B * z.T * z.H * z.D), 0.0);
  const auto at = [&](int64_t b, int64_t t, int64_t heads, int64_t h) {
    return static_cast<size_t>(((b * z.T + t) * heads + h) * z.D);
  };
  for (int64_t b = 0; b < z.B; ++b) {
    for (int64_t h = 0; h < z.H; ++h) {
      const int64_t j = h / (z.H / z.Hkv);
      for (int64_t t = 0; t < z.T; ++t) {
        const int64_t keys = causal ? t + 1 : z.T;
        Vec w(static_cast<size_t>(keys));
        double mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s < keys; ++s) {
          if (window > 0 && s <= t - window) {
            w[static_cast<size_t>(s)] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t e = 0; e < z.D; ++e)
            dot += q[at(b, t, z.H, h) + static_cast<size_t>(e)] *
                   k[at(b, s, z.Hkv, j) + static_cast<size_t>(e)];
          double score = dot * scale;
          if (cap > 0) score = cap * std::tanh(score / cap);
          mx = std::max(mx, w[static_cast<size_t>(s)] = score);
        }
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (int64_t s = 0; s < keys; ++s) {
          for (int64_t e = 0; e < z.D; ++e) {
            o[at(b, t, z.H, h) + static_cast<size_t>(e)] +=
                w[static_cast<size_t>(s)] / sum * v[at(b, s, z.Hkv, j) + static_cast<size_t>(e)];
          }
        }
      }
    }
  }
  return o;
}

struct MhaCase {
  Dims z;
  bool bias, causal;
  double theta;
  std::vector<std::pair<std::string, TensorLayout>> rules;
  std::string what;
  // The families' variations: no output bias (Qwen 2), per-head q/k RMS norms (Qwen 3), a
  // sliding window (Mistral), Llama 3's rope scaling.
  bool output_bias = true;
  double qk_norm_epsilon = 0.0;
  int64_t window = 0;
  std::optional<Llama3RopeScaling> scaling;
  double attention_scale = 0.0, logit_soft_cap = 0.0;  // Gemma
};

// y = attention_output(attention(rope(x·wq + bq), rope(x·wk + bk), x·wv + bv)) in double
// (with c.qk_norm_epsilon, each q and k head RMS-normalised before the rope).
Vec ref_forward(const Params& p, const MhaCase& c) {
  const Dims& z = c.z;
  const bool bias = c.bias;
  const double theta = c.theta;
  const int64_t rows = z.B * z.T;
  Vec q = ref_matmul(p.at("x"), p.at("wq"), rows, z.d, z.H * z.D);
  Vec k = ref_matmul(p.at("x"), p.at("wk"), rows, z.d, z.Hkv * z.D);
  Vec v = ref_matmul(p.at("x"), p.at("wv"), rows, z.d, z.Hkv * z.D);
  if (bias) {
    add_bias(q, p.at("bq"));
    add_bias(k, p.at("bk"));
    add_bias(v, p.at("bv"));
  }
  if (c.qk_norm_epsilon > 0) {
    testing::ref_rms_norm_rows(q, z.D, p.at("gq"), c.qk_norm_epsilon);
    testing::ref_rms_norm_rows(k, z.D, p.at("gk"), c.qk_norm_epsilon);
  }
  if (theta > 0) {
    testing::RefLlama3Scaling s;
    if (c.scaling) {
      s = {c.scaling->factor, c.scaling->low_freq_factor, c.scaling->high_freq_factor,
           static_cast<double>(c.scaling->original_max_position_embeddings)};
    }
    const Vec f = testing::ref_inverse_frequencies(z.D, theta, c.scaling ? &s : nullptr);
    testing::ref_rope_frequencies(q, z.B, z.T, z.H, z.D, 0, f);
    testing::ref_rope_frequencies(k, z.B, z.T, z.Hkv, z.D, 0, f);
  }
  Vec y =
      ref_matmul(ref_attention(q, k, v, z, c.causal, c.window, c.attention_scale, c.logit_soft_cap),
                 p.at("wo"), rows, z.H * z.D, z.d);
  if (bias && c.output_bias) add_bias(y, p.at("bo"));
  return y;
}

class MultiHeadAttentionBackwardTest : public NnTest {
 protected:
  void check(const MhaCase& c, uint64_t seed, DType dtype = DType::kF32) {
    const Dims& z = c.z;
    const bool f64 = dtype == DType::kF64;
    const double tolerance = f64 ? 1e-10 : 1e-4;
    SCOPED_TRACE(fmt::format("{}: B{} T{} d{} H{} Hkv{} D{} bias {} causal {} theta {} {}", c.what,
                             z.B, z.T, z.d, z.H, z.Hkv, z.D, c.bias, c.causal, c.theta,
                             dtype_name(dtype)));
    clear_session();
    LayoutMap rules(mesh_);
    for (const auto& [pattern, layout] : c.rules) rules[pattern] = layout;
    std::shared_ptr<MultiHeadAttention> attn;
    {
      LayoutMapScope scope = rules.scope();
      FloatxScope floatx(dtype);
      Tensor in = Input({z.T, z.d}, z.B);
      attn = std::make_shared<MultiHeadAttention>(
          MultiHeadAttentionOptions{.num_heads = z.H,
                                    .key_dim = z.D,
                                    .num_key_value_heads = z.Hkv,
                                    .use_bias = c.bias,
                                    .use_output_bias = c.output_bias,
                                    .causal = c.causal,
                                    .rope_theta = c.theta,
                                    .rope_scaling = c.scaling,
                                    .sliding_window = c.window,
                                    .qk_norm_epsilon = c.qk_norm_epsilon,
                                    .attention_scale = c.attention_scale,
                                    .logit_soft_cap = c.logit_soft_cap});
      (void)Model::functional(in, (*attn)(in));
    }
    // Every weight (biases too) random, so no gradient term is hidden by a zero.
    const std::pair<std::string, std::shared_ptr<EinsumDense>> dense[] = {
        {"q", attn->query()},
        {"k", attn->key()},
        {"v", attn->value()},
        {"o", attn->attention_output()}};
    Params p;
    const Shape x_shape{z.B, z.T, z.d};
    p["x"] = testing::random_values(x_shape, seed);
    for (size_t i = 0; i < 4; ++i) {
      const auto& [n, layer] = dense[i];
      p["w" + n] = testing::random_values(layer->kernel()->shape(), seed + 1 + i);
      layer->kernel()->assign(testing::to_dtype(layer->kernel()->shape(), p["w" + n], dtype));
      if (layer->bias()) {
        p["b" + n] = testing::random_values(layer->bias()->shape(), seed + 11 + i, 0.5);
        layer->bias()->assign(testing::to_dtype(layer->bias()->shape(), p["b" + n], dtype));
      }
    }
    const std::pair<std::string, std::shared_ptr<RMSNormalization>> norms[] = {
        {"gq", attn->query_norm()}, {"gk", attn->key_norm()}};
    for (size_t i = 0; i < 2; ++i) {
      const auto& [n, norm] = norms[i];
      if (!norm) continue;
      p[n] = testing::random_values(norm->scale()->shape(), seed + 30 + i, 0.5);
      for (double& e : p[n]) e += 1.0;  // around the ones a norm starts with
      norm->scale()->assign(testing::to_dtype(norm->scale()->shape(), p[n], dtype));
    }
    const std::vector<double> w = testing::random_values(x_shape, seed + 20);  // dL/dy
    const TensorLayout x_layout({"data", None, None}, mesh_);
    const Array x = distribute_tensor(testing::to_dtype(x_shape, p["x"], dtype), x_layout);
    const Array dy = distribute_tensor(testing::to_dtype(x_shape, w, dtype), x_layout);
    // F32: central differences; F64: a five-point stencil (~1e-12).
    const auto numeric = [&](const auto& fwd, const Params& params, const std::string& name) {
      return f64 ? numeric_gradient(fwd, params, name, w, 1e-3, true)
                 : numeric_gradient(fwd, params, name, w);
    };
    const auto forward = [&](const Params& q) { return ref_forward(q, c); };
    // The forward itself first: the reference must describe the layer.
    const Array y = attn->call_on(x);
    EXPECT_EQ(y.dtype(), dtype);
    expect_close(gathered_f64(y), forward(p), "forward", f64 ? 1e-13 : 1e-5);

    Gradients grads;
    const Array dx = attn->backward(x, dy, grads);
    EXPECT_EQ(dx.layout(), x_layout);
    EXPECT_EQ(dx.dtype(), dtype);
    expect_close(gathered_f64(dx), numeric(forward, p, "x"), "dx", tolerance);
    EXPECT_EQ(grads.size(),
              (c.bias ? (c.output_bias ? 8u : 7u) : 4u) + (c.qk_norm_epsilon > 0 ? 2u : 0u));
    for (const auto& [n, norm] : norms) {
      if (!norm) continue;
      const Array* g = grads.find(*norm->scale());
      ASSERT_NE(g, nullptr) << norm->scale()->path();
      expect_close(gathered_f64(*g), numeric(forward, p, n), norm->scale()->path(), tolerance);
    }
    for (const auto& [n, layer] : dense) {
      for (const auto& [key, var] :
           {std::pair{"w" + n, layer->kernel()}, std::pair{"b" + n, layer->bias()}}) {
        if (!var) continue;
        const Array* g = grads.find(*var);
        ASSERT_NE(g, nullptr) << var->path();
        EXPECT_EQ(g->layout(), var->value().layout()) << var->path();
        EXPECT_EQ(g->dtype(), dtype) << var->path();
        const std::vector<double> want = numeric(forward, p, key);
        if (key == "bk" && c.theta == 0 && c.qk_norm_epsilon == 0) {
          // Without RoPE a key bias adds q·b to every score of a row: the softmax ignores it.
          for (size_t i = 0; i < want.size(); ++i) {
            EXPECT_NEAR(want[i], 0.0, 1e-8);
            EXPECT_NEAR(gathered_f64(*g)[i], 0.0, 1e-6) << var->path();
          }
          continue;
        }
        expect_close(gathered_f64(*g), want, var->path(), tolerance);
      }
    }
  }
};

const TensorLayout kHeads({None, "model", None}), kOutHeads({"model", None, None}),
    kBiasHeads({"model", None});

std::vector<std::pair<std::string, TensorLayout>> megatron() {
  return {{"query.kernel|key.kernel|value.kernel", kHeads},
          {"attention_output.kernel", kOutHeads},
          {"query.bias|key.bias|value.bias", kBiasHeads}};
}

TEST_F(MultiHeadAttentionBackwardTest, GradientsMatchFiniteDifferencesOnEveryLayout) {
  const MhaCase cases[] = {
      {{2, 5, 8, 4, 4, 4}, true, true, 0.0, {}, "replicated MHA"},
      {{2, 5, 8, 4, 2, 4},
       false,
       true,
       100.0,
       megatron(),
       "Megatron, 2 KV heads on 4 (replicated)"},
      {{2, 5, 8, 4, 2, 4}, true, true, 100.0, megatron(), "Megatron, 2 KV heads on 4, biases"},
      {{2, 5, 8, 8, 4, 4}, true, false, 100.0, megatron(), "Megatron GQA aligned, not causal"},
      {{2, 5, 8, 4, 1, 4}, true, true, 0.0, megatron(), "Megatron, one KV head"},
      {{2, 5, 8, 4, 2, 4},
       true,
       true,
       100.0,
       {{"query.kernel|key.kernel|value.kernel", TensorLayout({"model", "data", None})},
        {"attention_output.kernel", TensorLayout({"data", None, "model"})}},
       "keras-hub 2-D kernels"},
  };
  uint64_t seed = 100;
  for (const MhaCase& c : cases) check(c, seed += 50);
  std::printf("[ info     ] max relative error against central differences: %.3g\n",
              testing::max_relative_error_seen());
}

// What the model families add: Qwen 2's q/k/v biases without an output bias, Qwen 3's q/k head
// norms (and their paths), Mistral's sliding window, Llama 3's rope scaling; F32 and F64.
TEST_F(MultiHeadAttentionBackwardTest, FamilyVariantsMatchFiniteDifferences) {
  const Llama3RopeScaling scaling{.factor = 4.0,
                                  .low_freq_factor = 1.0,
                                  .high_freq_factor = 4.0,
                                  .original_max_position_embeddings = 4};
  const MhaCase cases[] = {
      {{2, 5, 8, 4, 2, 4}, true, true, 100.0, megatron(), "Qwen 2: q/k/v biases", false},
      {{2, 5, 8, 4, 2, 4}, false, true, 100.0, megatron(), "Qwen 3: q/k norms", true, 1e-6},
      {{2, 6, 8, 4, 2, 4}, false, true, 100.0, megatron(), "Mistral: window 2", true, 0.0, 2},
      {{2, 5, 8, 4, 4, 8}, false, true, 500.0, {}, "Llama 3 rope scaling", true, 0.0, 0, scaling},
      {{2, 6, 8, 4, 2, 4},
       false,
       true,
       100.0,
       megatron(),
       "Gemma 2: window, query_pre_attn_scalar, soft cap",
       true,
       0.0,
       3,
       std::nullopt,
       0.3,
       0.8},
  };
  uint64_t seed = 900;
  for (const MhaCase& c : cases) {
    check(c, seed += 50);
    check(c, seed += 50, DType::kF64);
  }
  // The head norms sit under the attention's path, as keras-hub's Qwen 3 names them.
  clear_session();
  LayoutMap rules(mesh_);
  LayoutMapScope scope = rules.scope();
  Tensor in = Input({3, 8}, 2);
  auto attn =
      std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{.num_heads = 2,
                                                                     .key_dim = 4,
                                                                     .use_bias = false,
                                                                     .qk_norm_epsilon = 1e-6,
                                                                     .name = "self_attention"});
  (void)Model::functional(in, (*attn)(in));
  EXPECT_EQ(attn->query_norm()->scale()->path(), "self_attention/query_dense_layernorm/scale");
  EXPECT_EQ(attn->key_norm()->scale()->path(), "self_attention/key_dense_layernorm/scale");
  EXPECT_EQ(attn->query_norm()->scale()->shape(), (Shape{4}));
  std::printf("[ info     ] max relative error against central differences: %.3g\n",
              testing::max_relative_error_seen());
}

TEST_F(MultiHeadAttentionBackwardTest, GradientsInFloat64MatchAFivePointStencil) {
  const MhaCase cases[] = {
      {{2, 5, 8, 4, 2, 4}, true, true, 100.0, megatron(), "Megatron, 2 KV heads on 4, biases"},
      {{2, 5, 8, 8, 4, 4}, true, false, 100.0, megatron(), "Megatron GQA aligned, not causal"},
      {{2, 5, 8, 4, 2, 4},
       true,
       true,
       100.0,
       {{"query.kernel|key.kernel|value.kernel", TensorLayout({"model", "data", None})},
        {"attention_output.kernel", TensorLayout({"data", None, "model"})}},
       "keras-hub 2-D kernels"},
  };
  uint64_t seed = 700;
  for (const MhaCase& c : cases) check(c, seed += 50, DType::kF64);
}

TEST_F(MultiHeadAttentionBackwardTest, ErrorsNameTheLayerAndShapes) {
  const TensorLayout l3({None, None, None}, mesh_);
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {2, 3, 8}, 1), l3);
  Gradients grads;
  auto unbuilt =
      std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{.num_heads = 2, .key_dim = 4});
  EXPECT_THROW(unbuilt->backward(x, x, grads), FailedPreconditionError);
  LayoutMap rules(mesh_);
  std::shared_ptr<MultiHeadAttention> attn;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({3, 8}, 2);
    attn = std::make_shared<MultiHeadAttention>(
        MultiHeadAttentionOptions{.num_heads = 2, .key_dim = 4});
    (void)Model::functional(in, (*attn)(in));
  }
  const Array bad = distribute_tensor(HostTensor::random(DType::kF32, {2, 3, 6}, 1), l3);
  EXPECT_TRUE(
      testing::HasSubstr(testing::ValueErrorMessage([&] { attn->backward(x, bad, grads); }),
                         "dy must be F32 of the output's shape (2, 3, 8), got F32 (2, 3, 6)"));
  EXPECT_TRUE(
      testing::HasSubstr(testing::ValueErrorMessage([&] { attn->backward(bad, bad, grads); }),
                         "x must be F32 (batch, seq, 8), got F32 (2, 3, 6)"));
  EXPECT_EQ(grads.size(), 0u);
}

}  // namespace
}  // namespace meshlayout
