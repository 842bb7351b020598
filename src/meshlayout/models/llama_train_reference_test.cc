// The float64 training reference checked against itself: every weight's analytic gradient
// against central finite differences of its loss (tied and untied), its logits against
// reference_llama_logits for a LlamaModel's weights, Keras' SGD / Adam / AdamW steps against
// updates computed by hand, and train_losses against the loop it stands for.
#include "meshlayout/models/llama_train_reference.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "meshlayout/layout/devices.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::ReferenceLlama;
using testing::ReferenceOptimizer;
using testing::ReferenceOptimizerSettings;
using testing::Vec;
using testing::Weights;

LlamaConfig tiny(bool tied) {
  return LlamaConfig{.vocab_size = 11,
                     .hidden_size = 8,
                     .intermediate_size = 12,
                     .num_hidden_layers = 2,
                     .num_attention_heads = 4,
                     .num_key_value_heads = 2,
                     .head_dim = 2,
                     .rms_norm_eps = 1e-5,
                     .rope_theta = 10000.0,
                     .tie_word_embeddings = tied,
                     .max_position_embeddings = 64};
}

double uniform(testing::Random& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng.next() >> 11) * 0x1.0p-53;
}

// Weights large enough that every nonlinearity matters: kernels and embeddings in [-1, 1),
// norm scales in [0.5, 1.5).
ReferenceLlama random_reference(const LlamaConfig& config, uint64_t seed) {
  testing::Random rng(seed);
  Weights w;
  for (const auto& [path, shape] : testing::llama_weight_shapes(config)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    const bool scale = path.ends_with("/scale");
    for (int64_t k = 0; k < n; ++k)
      w[path].push_back(scale ? uniform(rng, 0.5, 1.5) : uniform(rng, -1.0, 1.0));
  }
  return ReferenceLlama(config, std::move(w));
}

std::vector<int32_t> random_tokens(testing::Random& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> out;
  for (int64_t k = 0; k < n; ++k) out.push_back(static_cast<int32_t>(rng.uniform(vocab)));
  return out;
}

TEST(LlamaTrainReferenceTest, GradientsMatchCentralFiniteDifferences) {
  const int64_t B = 2, T = 5;
  double worst_overall = 0;
  // head_dim 2 has one RoPE frequency (1, whatever rope_theta); head_dim 4 and rope_theta 50
  // give two, so the rotation's dependence on theta is checked too.
  LlamaConfig two_frequencies = tiny(false);
  two_frequencies.num_attention_heads = 2;
  two_frequencies.num_key_value_heads = 1;
  two_frequencies.head_dim = 4;
  two_frequencies.rope_theta = 50.0;
  for (const LlamaConfig& config : {tiny(false), tiny(true), two_frequencies}) {
    const bool tied = config.tie_word_embeddings;
    ReferenceLlama ref = random_reference(config, tied ? 7 : 3);
    testing::Random rng(tied ? 11 : 5);
    const std::vector<int32_t> inputs = random_tokens(rng, B * T, config.vocab_size);
    const std::vector<int32_t> targets = random_tokens(rng, B * T, config.vocab_size);
    const auto [loss, grads] = ref.loss_and_gradients(inputs, targets, B, T);
    EXPECT_EQ(loss, ref.loss(inputs, targets, B, T));
    ASSERT_EQ(grads.size(), ref.weights.size());
    const double h = 1e-5;
    for (const auto& [path, shape] : testing::llama_weight_shapes(config)) {
      Vec& w = ref.weights.at(path);
      const Vec& analytic = grads.at(path);
      double worst = 0, scale = 1e-8;
      for (size_t k = 0; k < w.size(); ++k) {
        const double saved = w[k];
        w[k] = saved + h;
        const double up = ref.loss(inputs, targets, B, T);
        w[k] = saved - h;
        const double down = ref.loss(inputs, targets, B, T);
        w[k] = saved;
        const double numeric = (up - down) / (2 * h);
        worst = std::max(worst, std::abs(analytic[k] - numeric));
        scale = std::max(scale, std::abs(numeric));
      }
      // Relative to the largest gradient element of the weight (some elements are exactly 0:
      // unused embedding rows).
      EXPECT_LE(worst / scale, 1e-6)
          << path << (tied ? " (tied)" : " (untied)") << " head_dim " << config.head_dim;
      EXPECT_GT(scale, 1e-4) << path << ": a gradient this small checks nothing";
      worst_overall = std::max(worst_overall, worst / scale);
    }
  }
  std::printf("[ max rel  ] analytic vs finite-difference gradient: %.3g\n", worst_overall);
}

TEST(LlamaTrainReferenceTest, LogitsAndLossMatchReferenceLlamaLogitsOfTheModelsWeights) {
  set_device_count(1);
  const int64_t B = 2, T = 5;
  testing::Random rng(19);
  for (const bool tied : {false, true}) {
    clear_session();
    LlamaModel model(tiny(tied), LayoutMap(DeviceMesh({1}, {"batch"})));
    const ReferenceLlama ref(model);
    std::vector<std::string> model_order;
    for (const VariablePtr& v : model.variables()) model_order.push_back(v->path());
    std::vector<std::string> shapes_order;
    for (const auto& [path, shape] : testing::llama_weight_shapes(model.config()))
      shapes_order.push_back(path);
    EXPECT_EQ(shapes_order, model_order);

    const std::vector<int32_t> inputs = random_tokens(rng, B * T, 11);
    const std::vector<int32_t> targets = random_tokens(rng, B * T, 11);
    const Vec want = testing::reference_llama_logits(model, inputs, B, T);
    const Vec got = ref.logits(inputs, B, T);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0, scale = 1e-30, want_loss = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      worst = std::max(worst, std::abs(got[k] - want[k]));
      scale = std::max(scale, std::abs(want[k]));
    }
    EXPECT_LE(worst / scale, 1e-12) << (tied ? "tied" : "untied");
    for (int64_t r = 0; r < B * T; ++r) {  // mean of logsumexp − target logit, written out
      double sum = 0;
      for (int64_t v = 0; v < 11; ++v) sum += std::exp(want[static_cast<size_t>(r * 11 + v)]);
      want_loss +=
          std::log(sum) - want[static_cast<size_t>(r * 11 + targets[static_cast<size_t>(r)])];
    }
    EXPECT_NEAR(ref.loss(inputs, targets, B, T), want_loss / (B * T), 1e-12)
        << (tied ? "tied" : "untied");
  }
  reset_device_count();
}

TEST(LlamaTrainReferenceTest, RefusesMissingOrMisSizedWeightsAndBadTokens) {
  ReferenceLlama ref = random_reference(tiny(false), 1);
  Weights missing = ref.weights;
  missing.erase("token_embedding/reverse_embeddings");
  EXPECT_THROW(ReferenceLlama(tiny(false), missing), std::invalid_argument);
  Weights extra = ref.weights;
  EXPECT_THROW(ReferenceLlama(tiny(true), extra), std::invalid_argument);  // tied: no reverse table
  Weights short_weight = ref.weights;
  short_weight["sequence_output_layernorm/scale"].pop_back();
  EXPECT_THROW(ReferenceLlama(tiny(false), short_weight), std::invalid_argument);
  EXPECT_THROW(ref.loss({0, 1, 11}, {0, 1, 2}, 1, 3), std::invalid_argument);
  EXPECT_THROW(ref.loss({0, 1, 2}, {0, 1}, 1, 3), std::invalid_argument);
}

// Keras 3 Adam (keras/src/optimizers/adam.py), by hand: t = iterations + 1,
// m += (g − m)(1 − β1), v += (g² − v)(1 − β2), α = lr·√(1 − β2^t)/(1 − β1^t),
// θ −= m·α / (√v + ε).
TEST(LlamaTrainReferenceTest, AdamStepsMatchKerasUpdateByHand) {
  const double lr = 0.125, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  const Vec g1 = {0.5, -0.25}, g2 = {-0.125, 0.75};
  Weights w = {{"w", {1.0, -2.0}}};
  ReferenceOptimizer adam({.name = "adam", .options = {.learning_rate = lr}});
  adam.apply(w, {{"w", g1}});
  Vec m(2), v(2), want(2);
  const double a1 = lr * std::sqrt(1 - b2) / (1 - b1);
  for (size_t k = 0; k < 2; ++k) {
    m[k] = (1 - b1) * g1[k];
    v[k] = (1 - b2) * g1[k] * g1[k];
  }
  want = {1.0 - m[0] * a1 / (std::sqrt(v[0]) + eps), -2.0 - m[1] * a1 / (std::sqrt(v[1]) + eps)};
  EXPECT_DOUBLE_EQ(w["w"][0], want[0]);
  EXPECT_DOUBLE_EQ(w["w"][1], want[1]);
  EXPECT_NEAR(w["w"][0], 0.875000790564415, 1e-15);  // ≈ θ − lr·sign(g): Adam's first step
  EXPECT_NEAR(w["w"][1], -1.8750015811188303, 1e-15);
  EXPECT_EQ(adam.slot("momentum", "w"), m);

  adam.apply(w, {{"w", g2}});
  const double a2 = lr * std::sqrt(1 - b2 * b2) / (1 - b1 * b1);
  for (size_t k = 0; k < 2; ++k) {
    m[k] = b1 * (1 - b1) * g1[k] + (1 - b1) * g2[k];  // the exponential averages, unrolled
    v[k] = b2 * (1 - b2) * g1[k] * g1[k] + (1 - b2) * g2[k] * g2[k];
    want[k] -= m[k] * a2 / (std::sqrt(v[k]) + eps);
  }
  EXPECT_NEAR(w["w"][0], want[0], 1e-15);
  EXPECT_NEAR(w["w"][1], want[1], 1e-15);
  EXPECT_NEAR(w["w"][0], 0.8163176293964308, 1e-15);
  EXPECT_NEAR(w["w"][1], -1.9367750631746818, 1e-15);
  EXPECT_EQ(adam.iterations(), 2);
}

// Keras 3 AdamW: θ ← θ − θ·wd·lr first (pre-update θ), then Adam; a weight whose leaf name
// matches exclude_from_weight_decay is not decayed.
TEST(LlamaTrainReferenceTest, AdamWDecaysThenStepsAsKeras) {
  const double lr = 0.125, wd = 0.5, b1 = 0.9, b2 = 0.999, eps = 1e-7;
  const Vec g = {0.5, -0.25};
  Weights w = {{"dense/kernel", {1.0, -2.0}}, {"norm/scale", {1.0, -2.0}}};
  ReferenceOptimizer adamw({.name = "AdamW",
                            .options = {.learning_rate = lr, .weight_decay = wd},
                            .exclude_from_weight_decay = {"sca"}});
  adamw.apply(w, {{"dense/kernel", g}, {"norm/scale", g}});
  const double a1 = lr * std::sqrt(1 - b2) / (1 - b1);
  for (size_t k = 0; k < 2; ++k) {
    const double theta = k == 0 ? 1.0 : -2.0;
    const double adam_delta = (1 - b1) * g[k] * a1 / (std::sqrt((1 - b2) * g[k] * g[k]) + eps);
    EXPECT_NEAR(w["dense/kernel"][k], theta - theta * wd * lr - adam_delta, 1e-15);
    EXPECT_NEAR(w["norm/scale"][k], theta - adam_delta, 1e-15);
  }
  EXPECT_NEAR(w["dense/kernel"][0], 0.812500790564415, 1e-15);
  EXPECT_NEAR(w["dense/kernel"][1], -1.7500015811188303, 1e-15);
  // AdamW's default weight decay is 0.004; the learning rate is float32 as Keras' variable.
  ReferenceOptimizer defaults({.name = "adamw", .options = {.learning_rate = 0.1}});
  Weights x = {{"k", {2.0}}};
  defaults.apply(x, {{"k", {0.0}}});  // m = v = 0: only the decay moves θ
  EXPECT_EQ(x["k"][0], 2.0 - 2.0 * 0.004 * static_cast<double>(0.1f));
}

// Keras 3 SGD: m ← μ·m − lr·g; θ += m, or θ += μ·m − lr·g (nesterov); μ = 0: θ −= lr·g.
TEST(LlamaTrainReferenceTest, SgdStepsMatchKerasUpdateByHand) {
  const double lr = 0.25, mu = 0.5;
  const Vec g1 = {0.5, -0.25}, g2 = {-0.125, 0.75};
  for (const bool nesterov : {false, true}) {
    Weights w = {{"w", {1.0, -2.0}}};
    ReferenceOptimizer sgd(
        {.name = "sgd", .options = {.learning_rate = lr, .momentum = mu, .nesterov = nesterov}});
    sgd.apply(w, {{"w", g1}});
    sgd.apply(w, {{"w", g2}});
    for (size_t k = 0; k < 2; ++k) {
      const double m1 = -lr * g1[k], m2 = mu * m1 - lr * g2[k];
      const double theta0 = k == 0 ? 1.0 : -2.0;
      const double want =
          nesterov ? theta0 + (mu * m1 - lr * g1[k]) + (mu * m2 - lr * g2[k]) : theta0 + m1 + m2;
      EXPECT_DOUBLE_EQ(w["w"][k], want) << (nesterov ? "nesterov" : "momentum");
    }
  }
  Weights w = {{"w", {1.0, -2.0}}};
  ReferenceOptimizer plain({.name = "SGD", .options = {.learning_rate = lr}});
  plain.apply(w, {{"w", g1}});
  EXPECT_EQ(w["w"], (Vec{1.0 - lr * 0.5, -2.0 + lr * 0.25}));
  EXPECT_THROW(ReferenceOptimizer({.name = "sgd", .options = {.beta_1 = 0.5}}),
               std::invalid_argument);
  EXPECT_THROW(ReferenceOptimizer({.name = "rmsprop"}), std::invalid_argument);
}

TEST(LlamaTrainReferenceTest, GradientClippingAsKeras) {
  const Weights g = {{"a", {3.0, 4.0}}, {"b", {0.0, 12.0}}};  // norms 5 and 12, global 13
  const auto step = [&](OptimizerOptions o) {
    o.learning_rate = 1.0;
    Weights w = {{"a", {0.0, 0.0}}, {"b", {0.0, 0.0}}};
    ReferenceOptimizer({.name = "sgd", .options = o}).apply(w, g);
    return w;
  };
  Weights w = step({.clipnorm = 6.0});  // a under the norm: unchanged; b scaled to norm 6
  EXPECT_EQ(w["a"], (Vec{-3.0, -4.0}));
  EXPECT_EQ(w["b"], (Vec{0.0, -6.0}));
  w = step({.global_clipnorm = 6.5});  // everything halved
  EXPECT_EQ(w["a"], (Vec{-1.5, -2.0}));
  EXPECT_EQ(w["b"], (Vec{0.0, -6.0}));
  w = step({.clipvalue = 3.5});
  EXPECT_EQ(w["a"], (Vec{-3.0, -3.5}));
}

TEST(LlamaTrainReferenceTest, TrainLossesAreTheLossBeforeEachStepOnConsecutiveRows) {
  const LlamaConfig config = tiny(true);
  const ReferenceLlama start = random_reference(config, 23);
  testing::Random rng(29);
  const int64_t rows_count = 7, seq_plus_one = 5, batch = 2, T = seq_plus_one - 1;
  const std::vector<int32_t> rows =
      random_tokens(rng, rows_count * seq_plus_one, config.vocab_size);
  const ReferenceOptimizerSettings adamw{.name = "adamw", .options = {.learning_rate = 0.01}};
  const std::vector<double> losses =
      testing::train_losses(start, rows, rows_count, seq_plus_one, batch, 3, adamw);

  ReferenceLlama model = start;
  ReferenceOptimizer opt(adamw);
  ASSERT_EQ(losses.size(), 3u);
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<int32_t> inputs, targets;
    for (int64_t r = step * batch; r < (step + 1) * batch; ++r) {
      for (int64_t t = 0; t < T; ++t) {
        inputs.push_back(rows[static_cast<size_t>(r * seq_plus_one + t)]);
        targets.push_back(rows[static_cast<size_t>(r * seq_plus_one + t + 1)]);
      }
    }
    EXPECT_EQ(losses[static_cast<size_t>(step)], model.loss(inputs, targets, batch, T)) << step;
    opt.apply(model.weights, model.gradients(inputs, targets, batch, T));
  }

  // The same batch every step: Adam drives its loss down.
  std::vector<int32_t> repeated;
  for (int k = 0; k < 10; ++k)
    repeated.insert(repeated.end(), rows.begin(), rows.begin() + batch * seq_plus_one);
  const std::vector<double> fit =
      testing::train_losses(start, repeated, 20, seq_plus_one, batch, 10,
                            {.name = "adam", .options = {.learning_rate = 0.05}});
  EXPECT_LT(fit.back(), 0.5 * fit.front());

  EXPECT_THROW(testing::train_losses(start, rows, rows_count, seq_plus_one, batch, 4, adamw),
               std::invalid_argument);
  EXPECT_THROW(testing::train_losses(start, rows, rows_count + 1, seq_plus_one, batch, 1, adamw),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshlayout
