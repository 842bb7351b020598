// llama_train_reference.h — the float64 reference for Llama training (test-only): a Llama written
// from the formulas (as llama.h: h = x + attn(norm(x)); y = h + down(silu(gate(n))·up(n)),
// n = norm(h); final RMSNorm; tied or untied reverse embedding), its loss (keras'
// SparseCategoricalCrossentropy(from_logits=True), the mean over all B·T positions), the
// analytic gradient of that loss w.r.t. every weight, Keras 3 SGD / Adam / AdamW steps
// (train/optimizer.h's semantics, computed in float64) and the `meshlayout train` loop.
//
//   * ReferenceLlama: the config and every weight as a float64 vector keyed by keras-hub path
//     (llama.h lists them), from a LlamaModel's gathered weights or from a plain map;
//   * ReferenceOptimizer: Keras' step — clip the gradients, decoupled weight decay
//     θ ← θ − θ·wd·lr (pre-update θ), the update rule, iterations += 1. The learning rate is
//     rounded to float32, as Keras' (and train/optimizer.h's) float32 `learning_rate` variable;
//     everything else is float64;
//   * train_losses: the loss before each step, step i on rows [i·B, (i+1)·B) of the token rows,
//     inputs row[:-1], targets row[1:].
//
// Example:
//   ReferenceLlama ref(model);                     // the LlamaModel's gathered weights
//   double l = ref.loss(inputs, targets, B, T);
//   Weights g = ref.gradients(inputs, targets, B, T);   // path → d loss / d weight
//   ReferenceOptimizer adam({.name = "adam", .options = {.learning_rate = 1e-3}});
//   adam.apply(ref.weights, g);
//   std::vector<double> losses = train_losses(ReferenceLlama(model), rows, /*rows_count=*/40,
//       /*seq_plus_one=*/9, /*batch=*/4, /*steps=*/10, {.name = "adamw"});
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/nn/transformer_reference.h"
#include "meshlayout/train/optimizer.h"

namespace meshlayout::testing {

/// Float64 tensors (row-major) keyed by keras-hub path: weights, gradients, optimizer slots.
using Weights = std::map<std::string, Vec>;

/// Every weight of a Llama of `config` with its shape, in LlamaModel::variables() order.
inline std::vector<std::pair<std::string, std::vector<int64_t>>> llama_weight_shapes(
    const LlamaConfig& c) {
  const int64_t d = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim;
  const int64_t ff = c.intermediate_size, V = c.vocab_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
      {"token_embedding/embeddings", {V, d}}};
  if (!c.tie_word_embeddings) out.push_back({"token_embedding/reverse_embeddings", {d, V}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "transformer_layer_" + std::to_string(i) + "/";
    out.push_back({p + "self_attention_layernorm/scale", {d}});
    out.push_back({p + "self_attention/query/kernel", {d, H, D}});
    out.push_back({p + "self_attention/key/kernel", {d, Hkv, D}});
    out.push_back({p + "self_attention/value/kernel", {d, Hkv, D}});
    out.push_back({p + "self_attention/attention_output/kernel", {H, D, d}});
    out.push_back({p + "feedforward_layernorm/scale", {d}});
    out.push_back({p + "feedforward_gate_dense/kernel", {d, ff}});
    out.push_back({p + "feedforward_intermediate_dense/kernel", {d, ff}});
    out.push_back({p + "feedforward_output_dense/kernel", {ff, d}});
  }
  out.push_back({"sequence_output_layernorm/scale", {d}});
  return out;
}

/// A Llama in float64. `weights` may be read and written directly (finite differences, steps).
struct ReferenceLlama {
  LlamaConfig config;
  Weights weights;

  /// std::invalid_argument naming the path for a missing, unexpected or mis-sized weight.
  ReferenceLlama(const LlamaConfig& config_in, Weights weights_in)
      : config(config_in), weights(std::move(weights_in)) {
    size_t expected = 0;
    for (const auto& [path, shape] : llama_weight_shapes(config)) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      const auto it = weights.find(path);
      if (it == weights.end())
        throw std::invalid_argument("ReferenceLlama: missing weight " + path);
      if (static_cast<int64_t>(it->second.size()) != n) {
        throw std::invalid_argument("ReferenceLlama: " + path + " has " +
                                    std::to_string(it->second.size()) + " elements, expected " +
                                    std::to_string(n));
      }
      ++expected;
    }
    if (weights.size() != expected) {
      for (const auto& [path, w] : weights) {
        bool known = false;
        for (const auto& [p, s] : llama_weight_shapes(config)) known = known || p == path;
        if (!known) throw std::invalid_argument("ReferenceLlama: unexpected weight " + path);
      }
    }
  }

  /// The model's gathered weights (float32 widened to float64; float64 as they are).
  explicit ReferenceLlama(LlamaModel& model)
      : ReferenceLlama(model.config(), gathered_weights(model)) {}

  static Weights gathered_weights(LlamaModel& model) {
    const auto vars = model.variables_by_path();
    Weights out;
    for (const auto& [path, shape] : llama_weight_shapes(model.config()))
      out[path] = gathered(vars, path);
    return out;
  }

  /// Logits (B, T, V) of tokens (row-major B × T).
  Vec logits(const std::vector<int32_t>& tokens, int64_t B, int64_t T) const {
    return forward(tokens, B, T).logits;
  }

  /// The mean sparse categorical cross-entropy over the B·T positions of logits(tokens_in).
  double loss(const std::vector<int32_t>& tokens_in, const std::vector<int32_t>& targets, int64_t B,
              int64_t T) const {
    return cross_entropy(forward(tokens_in, B, T).logits, targets, B * T, nullptr);
  }

  /// d loss / d weight for every weight (the tied table gets the lookup's and the reverse
  /// projection's gradients summed).
  Weights gradients(const std::vector<int32_t>& tokens_in, const std::vector<int32_t>& targets,
                    int64_t B, int64_t T) const {
    return loss_and_gradients(tokens_in, targets, B, T).second;
  }

  /// Both, from one forward.
  std::pair<double, Weights> loss_and_gradients(const std::vector<int32_t>& tokens_in,
                                                const std::vector<int32_t>& targets, int64_t B,
                                                int64_t T) const {
    const LlamaConfig& c = config;
    const int64_t d = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                  D = c.head_dim;
    const int64_t ff = c.intermediate_size, V = c.vocab_size, N = B * T;
    const Tape tape = forward(tokens_in, B, T);
    Vec dlogits;
    const double l = cross_entropy(tape.logits, targets, N, &dlogits);

    Weights g;
    for (const auto& [path, w] : weights) g[path] = Vec(w.size(), 0.0);
    const Vec& emb = weights.at("token_embedding/embeddings");
    // Reverse projection: logits = nf · Eᵀ (tied) or nf · R.
    Vec dnf;
    if (c.tie_word_embeddings) {
      add_to(g["token_embedding/embeddings"],
             ref_matmul(ref_transpose(dlogits, N, V), tape.final_normed, V, N, d));
      dnf = ref_matmul(dlogits, emb, N, V, d);
    } else {
      const Vec& rev = weights.at("token_embedding/reverse_embeddings");
      g["token_embedding/reverse_embeddings"] =
          ref_matmul(ref_transpose(tape.final_normed, N, d), dlogits, d, N, V);
      dnf = ref_matmul(dlogits, ref_transpose(rev, d, V), N, V, d);
    }
    Vec dx = ref_rms_norm_backward(tape.final_x, weights.at("sequence_output_layernorm/scale"), dnf,
                                   d, c.rms_norm_eps, g["sequence_output_layernorm/scale"]);

    for (int64_t i = c.num_hidden_layers - 1; i >= 0; --i) {
      const std::string p = "transformer_layer_" + std::to_string(i) + "/";
      const LayerTape& t = tape.layers[static_cast<size_t>(i)];
      // MLP: y = h + act · Wd, act = silu(g) · u, g = n2 · Wg, u = n2 · Wu, n2 = norm(h).
      const Vec& w_down = weights.at(p + "feedforward_output_dense/kernel");
      const Vec& w_gate = weights.at(p + "feedforward_gate_dense/kernel");
      const Vec& w_up = weights.at(p + "feedforward_intermediate_dense/kernel");
      add_to(g[p + "feedforward_output_dense/kernel"],
             ref_matmul(ref_transpose(t.act, N, ff), dx, ff, N, d));
      const Vec dact = ref_matmul(dx, ref_transpose(w_down, ff, d), N, d, ff);
      Vec dgate(dact.size()), dup(dact.size());
      for (size_t e = 0; e < dact.size(); ++e) {
        const double sig = 1.0 / (1.0 + std::exp(-t.gate[e]));
        dup[e] = dact[e] * t.gate[e] * sig;
        dgate[e] = dact[e] * t.up[e] * sig * (1.0 + t.gate[e] * (1.0 - sig));
      }
      const Vec n2t = ref_transpose(t.n2, N, d);
      add_to(g[p + "feedforward_gate_dense/kernel"], ref_matmul(n2t, dgate, d, N, ff));
      add_to(g[p + "feedforward_intermediate_dense/kernel"], ref_matmul(n2t, dup, d, N, ff));
      Vec dn2 = ref_matmul(dgate, ref_transpose(w_gate, d, ff), N, ff, d);
      add_to(dn2, ref_matmul(dup, ref_transpose(w_up, d, ff), N, ff, d));
      add_to(dx, ref_rms_norm_backward(t.h, weights.at(p + "feedforward_layernorm/scale"), dn2, d,
                                       c.rms_norm_eps, g[p + "feedforward_layernorm/scale"]));
      // Attention: h = x + o · Wo, o = attention(rope(n1 · Wq), rope(n1 · Wk), n1 · Wv).
      const Vec& w_out = weights.at(p + "self_attention/attention_output/kernel");
      add_to(g[p + "self_attention/attention_output/kernel"],
             ref_matmul(ref_transpose(t.o, N, H * D), dx, H * D, N, d));
      const Vec d_o = ref_matmul(dx, ref_transpose(w_out, H * D, d), N, d, H * D);
      AttentionGrads ag = ref_causal_attention_backward(t.q, t.k, t.v, d_o, B, T, H, Hkv, D);
      ref_rope_backward(ag.dq, B, T, H, D, 0, c.rope_theta);
      ref_rope_backward(ag.dk, B, T, Hkv, D, 0, c.rope_theta);
      const Vec n1t = ref_transpose(t.n1, N, d);
      add_to(g[p + "self_attention/query/kernel"], ref_matmul(n1t, ag.dq, d, N, H * D));
      add_to(g[p + "self_attention/key/kernel"], ref_matmul(n1t, ag.dk, d, N, Hkv * D));
      add_to(g[p + "self_attention/value/kernel"], ref_matmul(n1t, ag.dv, d, N, Hkv * D));
      Vec dn1 =
          ref_matmul(ag.dq, ref_transpose(weights.at(p + "self_attention/query/kernel"), d, H * D),
                     N, H * D, d);
      add_to(dn1, ref_matmul(ag.dk,
                             ref_transpose(weights.at(p + "self_attention/key/kernel"), d, Hkv * D),
                             N, Hkv * D, d));
      add_to(dn1,
             ref_matmul(ag.dv,
                        ref_transpose(weights.at(p + "self_attention/value/kernel"), d, Hkv * D), N,
                        Hkv * D, d));
      add_to(dx, ref_rms_norm_backward(t.x, weights.at(p + "self_attention_layernorm/scale"), dn1,
                                       d, c.rms_norm_eps, g[p + "self_attention_layernorm/scale"]));
    }
    // Embedding lookup: each position's gradient lands on its token's row.
    Vec& demb = g["token_embedding/embeddings"];
    for (int64_t r = 0; r < N; ++r) {
      const int64_t tok = tokens_in[static_cast<size_t>(r)];
      for (int64_t e = 0; e < d; ++e)
        demb[static_cast<size_t>(tok * d + e)] += dx[static_cast<size_t>(r * d + e)];
    }
    return {l, std::move(g)};
  }

 private:
  struct LayerTape {
    Vec x;         // the block's input (N, d)
    Vec n1;        // norm(x)
    Vec q, k, v;   // after RoPE (q, k): (B, T, heads, D)
    Vec o;         // attention output (N, H·D)
    Vec h;         // x + o · Wo
    Vec n2;        // norm(h)
    Vec gate, up;  // n2 · Wg, n2 · Wu (N, ff)
    Vec act;       // silu(gate) · up
  };
  struct Tape {
    std::vector<LayerTape> layers;
    Vec final_x, final_normed, logits;
  };

  static void add_to(Vec& a, const Vec& b) {
    for (size_t e = 0; e < a.size(); ++e) a[e] += b[e];
  }

  void check_tokens(const std::vector<int32_t>& tokens, int64_t n, const char* what) const {
    if (static_cast<int64_t>(tokens.size()) != n) {
      throw std::invalid_argument(std::string("ReferenceLlama: ") + what + " has " +
                                  std::to_string(tokens.size()) +
                                  " entries, expected B·T = " + std::to_string(n));
    }
    for (int32_t t : tokens) {
      if (t < 0 || t >= config.vocab_size) {
        throw std::invalid_argument(std::string("ReferenceLlama: ") + what + " holds " +
                                    std::to_string(t) + ", outside [0, " +
                                    std::to_string(config.vocab_size) + ")");
      }
    }
  }

  Tape forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T) const {
    const LlamaConfig& c = config;
    const int64_t d = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                  D = c.head_dim;
    const int64_t ff = c.intermediate_size, V = c.vocab_size, N = B * T;
    check_tokens(tokens, N, "tokens");
    const Vec& emb = weights.at("token_embedding/embeddings");
    Vec x(static_cast<size_t>(N * d));
    for (int64_t r = 0; r < N; ++r) {
      const int64_t tok = tokens[static_cast<size_t>(r)];
      std::copy(emb.begin() + tok * d, emb.begin() + (tok + 1) * d, x.begin() + r * d);
    }
    Tape tape;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const std::string p = "transformer_layer_" + std::to_string(i) + "/";
      LayerTape t;
      t.x = x;
      t.n1 = ref_rms_norm(x, weights.at(p + "self_attention_layernorm/scale"), d, c.rms_norm_eps);
      t.q = ref_matmul(t.n1, weights.at(p + "self_attention/query/kernel"), N, d, H * D);
      t.k = ref_matmul(t.n1, weights.at(p + "self_attention/key/kernel"), N, d, Hkv * D);
      t.v = ref_matmul(t.n1, weights.at(p + "self_attention/value/kernel"), N, d, Hkv * D);
      ref_rope(t.q, B, T, H, D, 0, c.rope_theta);
      ref_rope(t.k, B, T, Hkv, D, 0, c.rope_theta);
      t.o = ref_causal_attention(t.q, t.k, t.v, B, T, H, Hkv, D);
      t.h = ref_matmul(t.o, weights.at(p + "self_attention/attention_output/kernel"), N, H * D, d);
      add_to(t.h, x);
      t.n2 = ref_rms_norm(t.h, weights.at(p + "feedforward_layernorm/scale"), d, c.rms_norm_eps);
      t.gate = ref_matmul(t.n2, weights.at(p + "feedforward_gate_dense/kernel"), N, d, ff);
      t.up = ref_matmul(t.n2, weights.at(p + "feedforward_intermediate_dense/kernel"), N, d, ff);
      t.act.resize(t.gate.size());
      for (size_t e = 0; e < t.gate.size(); ++e)
        t.act[e] = t.gate[e] / (1.0 + std::exp(-t.gate[e])) * t.up[e];
      x = ref_matmul(t.act, weights.at(p + "feedforward_output_dense/kernel"), N, ff, d);
      add_to(x, t.h);
      tape.layers.push_back(std::move(t));
    }
    tape.final_normed =
        ref_rms_norm(x, weights.at("sequence_output_layernorm/scale"), d, c.rms_norm_eps);
    tape.final_x = std::move(x);
    tape.logits = c.tie_word_embeddings
                      ? ref_matmul(tape.final_normed, ref_transpose(emb, V, d), N, d, V)
                      : ref_matmul(tape.final_normed,
                                   weights.at("token_embedding/reverse_embeddings"), N, d, V);
    return tape;
  }

  // Mean over the N rows of logsumexp(row) − row[target]; with `dlogits`, (softmax − onehot) / N.
  double cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t N,
                       Vec* dlogits) const {
    check_tokens(targets, N, "targets");
    const int64_t V = config.vocab_size;
    if (dlogits) dlogits->assign(logits.size(), 0.0);
    double total = 0;
    for (int64_t r = 0; r < N; ++r) {
      const double* row = logits.data() + r * V;
      const double mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
      const double lse = mx + std::log(sum);
      const int64_t target = targets[static_cast<size_t>(r)];
      total += lse - row[target];
      if (dlogits) {
        double* drow = dlogits->data() + r * V;
        for (int64_t v = 0; v < V; ++v)
          drow[v] = (std::exp(row[v] - lse) - (v == target ? 1.0 : 0.0)) / static_cast<double>(N);
      }
    }
    return total / static_cast<double>(N);
  }
};

/// Which Keras 3 optimizer, with make_optimizer's arguments and defaults (train/optimizer.h):
/// name "sgd", "adam" or "adamw" (any case); SGD lr 0.01, momentum 0, nesterov false; Adam and
/// AdamW lr 0.001, beta_1 0.9, beta_2 0.999, epsilon 1e-7, amsgrad false; weight_decay none
/// (AdamW 0.004); clipnorm / clipvalue / global_clipnorm as Keras.
struct ReferenceOptimizerSettings {
  std::string name = "adam";
  OptimizerOptions options;
  /// optimizer.exclude_from_weight_decay(var_names=…): regexes searched in the leaf name
  /// ("scale", "kernel", "embeddings").
  std::vector<std::string> exclude_from_weight_decay;
};

/// Keras 3 SGD / Adam / AdamW on float64 weights. Slots are zeros until a weight's first step.
class ReferenceOptimizer {
 public:
  explicit ReferenceOptimizer(ReferenceOptimizerSettings settings) : s_(std::move(settings)) {
    std::string key = s_.name;
    for (char& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const OptimizerOptions& o = s_.options;
    if (key == "sgd") {
      kind_ = Kind::kSgd;
      if (o.beta_1 || o.beta_2 || o.epsilon || o.amsgrad)
        throw std::invalid_argument("SGD takes no beta/epsilon/amsgrad");
    } else if (key == "adam" || key == "adamw") {
      kind_ = Kind::kAdam;
      if (o.momentum || o.nesterov) throw std::invalid_argument("Adam takes no momentum/nesterov");
    } else {
      throw std::invalid_argument("ReferenceOptimizer: unknown optimizer " + s_.name);
    }
    lr_ = static_cast<double>(
        static_cast<float>(o.learning_rate.value_or(kind_ == Kind::kSgd ? 0.01 : 0.001)));
    weight_decay_ =
        key == "adamw" ? std::optional<double>(o.weight_decay.value_or(0.004)) : o.weight_decay;
    momentum_ = o.momentum.value_or(0.0);
    nesterov_ = o.nesterov.value_or(false);
    beta_1_ = o.beta_1.value_or(0.9);
    beta_2_ = o.beta_2.value_or(0.999);
    epsilon_ = o.epsilon.value_or(1e-7);
    amsgrad_ = o.amsgrad.value_or(false);
  }

  int64_t iterations() const { return iterations_; }
  /// The learning rate used (rounded to float32 as Keras' variable).
  double learning_rate() const { return lr_; }

  /// Slot "momentum" (SGD with momentum, Adam), "velocity" or "velocity_hat" (amsgrad) of the
  /// weight at `path`; std::out_of_range before its first step.
  const Vec& slot(const std::string& name, const std::string& path) const {
    return slots_.at(name).at(path);
  }

  /// One Keras step on every weight: clip the gradients → weight decay → update → iterations
  /// += 1. std::invalid_argument if a weight has no gradient of its size.
  void apply(Weights& weights, const Weights& gradients) {
    Weights grads;
    for (const auto& [path, w] : weights) {
      const auto it = gradients.find(path);
      if (it == gradients.end() || it->second.size() != w.size()) {
        throw std::invalid_argument("ReferenceOptimizer: no gradient of the right size for " +
                                    path);
      }
      grads[path] = it->second;
    }
    clip(grads);
    const double t = static_cast<double>(iterations_ + 1);
    const double alpha = lr_ * std::sqrt(1.0 - std::pow(beta_2_, t)) / (1.0 - std::pow(beta_1_, t));
    for (auto& [path, theta] : weights) {
      const Vec& g = grads.at(path);
      if (weight_decay_ && use_weight_decay(path)) {
        for (double& x : theta) x = x - x * *weight_decay_ * lr_;
      }
      if (kind_ == Kind::kSgd) {
        if (momentum_ == 0.0) {
          for (size_t k = 0; k < theta.size(); ++k) theta[k] -= g[k] * lr_;
          continue;
        }
        Vec& m = slot_of("momentum", path, theta.size());
        for (size_t k = 0; k < theta.size(); ++k) {
          m[k] = m[k] * momentum_ - g[k] * lr_;
          theta[k] += nesterov_ ? m[k] * momentum_ - g[k] * lr_ : m[k];
        }
        continue;
      }
      Vec& m = slot_of("momentum", path, theta.size());
      Vec& v = slot_of("velocity", path, theta.size());
      Vec* v_hat = amsgrad_ ? &slot_of("velocity_hat", path, theta.size()) : nullptr;
      for (size_t k = 0; k < theta.size(); ++k) {
        m[k] += (g[k] - m[k]) * (1.0 - beta_1_);
        v[k] += (g[k] * g[k] - v[k]) * (1.0 - beta_2_);
        double denom_v = v[k];
        if (v_hat) denom_v = (*v_hat)[k] = std::max((*v_hat)[k], v[k]);
        theta[k] -= (m[k] * alpha) / (std::sqrt(denom_v) + epsilon_);
      }
    }
    ++iterations_;
  }

 private:
  enum class Kind { kSgd, kAdam };

  Vec& slot_of(const std::string& name, const std::string& path, size_t n) {
    Vec& s = slots_[name][path];
    if (s.empty()) s.assign(n, 0.0);
    return s;
  }

  bool use_weight_decay(const std::string& path) const {
    const std::string leaf = path.substr(path.rfind('/') + 1);
    for (const std::string& pattern : s_.exclude_from_weight_decay) {
      if (std::regex_search(leaf, std::regex(pattern))) return false;
    }
    return true;
  }

  // Keras _clip_gradients: clipvalue elementwise; clipnorm g·c / max(‖g‖, c) per weight;
  // global_clipnorm g·c·min(1/‖all‖, 1/c).
  void clip(Weights& grads) const {
    const OptimizerOptions& o = s_.options;
    if (o.clipvalue) {
      for (auto& [path, g] : grads) {
        for (double& x : g) x = std::clamp(x, -*o.clipvalue, *o.clipvalue);
      }
    } else if (o.clipnorm) {
      for (auto& [path, g] : grads) {
        double ss = 0;
        for (double x : g) ss += x * x;
        const double div = std::max(std::sqrt(ss), *o.clipnorm);
        for (double& x : g) x = x * *o.clipnorm / div;
      }
    } else if (o.global_clipnorm) {
      double ss = 0;
      for (const auto& [path, g] : grads) {
        for (double x : g) ss += x * x;
      }
      const double scale =
          *o.global_clipnorm * std::min(1.0 / std::sqrt(ss), 1.0 / *o.global_clipnorm);
      for (auto& [path, g] : grads) {
        for (double& x : g) x *= scale;
      }
    }
  }

  ReferenceOptimizerSettings s_;
  Kind kind_ = Kind::kAdam;
  double lr_ = 0, momentum_ = 0, beta_1_ = 0, beta_2_ = 0, epsilon_ = 0;
  std::optional<double> weight_decay_;
  bool nesterov_ = false, amsgrad_ = false;
  int64_t iterations_ = 0;
  std::map<std::string, Weights> slots_;  // slot name → path → values
};

/// The `meshlayout train` contract: `rows` holds rows_count token rows of seq_plus_one tokens
/// (row-major); step i (0 ≤ i < steps) takes rows [i·batch, (i+1)·batch), inputs row[:-1],
/// targets row[1:], and applies one optimizer step. Returns the loss before each step (the one
/// the step's forward computes). std::invalid_argument if rows.size() != rows_count·seq_plus_one,
/// seq_plus_one < 2, or steps·batch > rows_count.
inline std::vector<double> train_losses(ReferenceLlama model, const std::vector<int32_t>& rows,
                                        int64_t rows_count, int64_t seq_plus_one, int64_t batch,
                                        int steps, const ReferenceOptimizerSettings& optimizer) {
  if (static_cast<int64_t>(rows.size()) != rows_count * seq_plus_one || seq_plus_one < 2 ||
      batch < 1) {
    throw std::invalid_argument("train_losses: " + std::to_string(rows.size()) +
                                " tokens are not " + std::to_string(rows_count) + " rows of " +
                                std::to_string(seq_plus_one) + " (>= 2) tokens, or batch " +
                                std::to_string(batch) + " < 1");
  }
  if (static_cast<int64_t>(steps) * batch > rows_count) {
    throw std::invalid_argument("train_losses: " + std::to_string(steps) + " steps of " +
                                std::to_string(batch) + " rows need " +
                                std::to_string(steps * batch) + " rows, have " +
                                std::to_string(rows_count));
  }
  const int64_t T = seq_plus_one - 1;
  ReferenceOptimizer opt(optimizer);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> inputs, targets;
    for (int64_t r = step * batch; r < (step + 1) * batch; ++r) {
      const auto row = rows.begin() + r * seq_plus_one;
      inputs.insert(inputs.end(), row, row + T);
      targets.insert(targets.end(), row + 1, row + seq_plus_one);
    }
    auto [loss, grads] = model.loss_and_gradients(inputs, targets, batch, T);
    losses.push_back(loss);
    opt.apply(model.weights, grads);
  }
  return losses;
}

}  // namespace meshlayout::testing
