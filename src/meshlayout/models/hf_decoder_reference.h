// hf_decoder_reference.h — (test-only) the float64 forward of the Llama-style families written
// from Hugging Face's modelling code (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py,
// modeling_qwen3.py), on the Hugging Face tensors themselves (names and (out, in) layouts as in
// the safetensors file), independent of meshlayout's keras-hub mapping and of its layers:
//   h = embed_tokens[ids]
//   per layer i:  n = rmsnorm(h) · input_layernorm;  q = n·q_projᵀ (+ q_proj.bias), k, v alike
//                 (qwen3: q, k ← rmsnorm over head_dim · q_norm / k_norm)
//                 q, k rotated (rotate_half, inv_freq with Llama 3's scaling when configured)
//                 a = softmax(q·kᵀ/√head_dim + causal (and sliding-window) mask) · v, GQA by
//                 repeat_kv; h = h + a·o_projᵀ (+ o_proj.bias)
//                 m = rmsnorm(h) · post_attention_layernorm; h = h + down(silu(gate(m)) · up(m))
//   logits = rmsnorm(h) · norm · lm_headᵀ (embed_tokens when tied).
// Gemma (modeling_gemma.py, modeling_gemma2.py): h = embed · sqrt(hidden_size); every norm
// multiplies by (1 + weight); scores scaled by query_pre_attn_scalar^(−1/2); the MLP is
// gelu_pytorch_tanh(gate) · up; Gemma 2 adds post_attention_layernorm on the attention's output
// and pre/post_feedforward_layernorm around the MLP, scores soft-capped
// (cap · tanh(s / cap)), a sliding window on even layers, and final logits soft-capped.
//
// Example:
//   std::map<std::string, HostTensor> hf = random_hf_tensors(config, 7);
//   Vec logits = hf_reference_logits(config, hf, tokens, /*B=*/2, /*T=*/5);   // (B, T, V)
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/models/hf_llama_checkpoint.h"

namespace meshlayout::testing {

using HfVec = std::vector<double>;

/// Every tensor of `config`'s Hugging Face checkpoint with random F32 values: matrices and
/// biases in [-1, 1), norm weights in [0.5, 1.5) (so no term hides behind a one or a zero).
inline std::map<std::string, HostTensor> random_hf_tensors(const LlamaConfig& config,
                                                           uint64_t seed) {
  std::map<std::string, HostTensor> out;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
    HostTensor t = HostTensor::random(DType::kF32, m.hf_shape, seed++);
    if (m.hf_name.find("norm") != std::string::npos) {
      float* v = t.data_as<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = 1.0f + 0.5f * v[i];
    }
    out.emplace(m.hf_name, std::move(t));
  }
  return out;
}

namespace hf_reference_internal {

inline HfVec values(const std::map<std::string, HostTensor>& hf, const std::string& name) {
  const HostTensor& t = hf.at(name);
  HfVec out(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i)
    out[static_cast<size_t>(i)] = t.data_as<float>()[i];
  return out;
}

// nn.Linear: x (rows, in) · Wᵀ with W (out, in), plus the bias when given.
inline HfVec linear(const HfVec& x, const HfVec& w, int64_t rows, int64_t in, int64_t out,
                    const HfVec* bias = nullptr) {
  HfVec y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? (*bias)[static_cast<size_t>(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i) {
        acc += x[static_cast<size_t>(r * in + i)] * w[static_cast<size_t>(o * in + i)];
      }
      y[static_cast<size_t>(r * out + o)] = acc;
    }
  }
  return y;
}

// LlamaRMSNorm over runs of `n`: x · rsqrt(mean(x²) + eps) · weight (GemmaRMSNorm with
// `plus_one`: · (1 + weight)).
inline HfVec rms_norm(const HfVec& x, int64_t n, const HfVec& weight, double eps,
                      bool plus_one = false) {
  HfVec y(x.size());
  for (size_t r = 0; r < x.size(); r += static_cast<size_t>(n)) {
    double sq = 0;
    for (int64_t i = 0; i < n; ++i)
      sq += x[r + static_cast<size_t>(i)] * x[r + static_cast<size_t>(i)];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      y[r + static_cast<size_t>(i)] = x[r + static_cast<size_t>(i)] * inv *
                                      (weight[static_cast<size_t>(i)] + (plus_one ? 1.0 : 0.0));
    }
  }
  return y;
}

// LlamaRotaryEmbedding's inv_freq, with _compute_llama3_parameters when rope_scaling is llama3.
// Gemma 3 (modeling_gemma3.py): sliding layers use rope_local_base_freq unscaled, global ones
// rope_theta with the "linear" scaling (inv_freq / factor).
inline HfVec inv_freq(const LlamaConfig& c, bool local = false) {
  const int64_t dim = c.head_dim;
  const double base = local ? c.rope_local_base_freq : c.rope_theta;
  HfVec f;
  for (int64_t i = 0; i < dim; i += 2) {
    f.push_back(1.0 / std::pow(base, static_cast<double>(i) / static_cast<double>(dim)));
  }
  if (local) return f;
  for (double& e : f) e /= c.rope_linear_factor;
  if (!c.rope_scaling) return f;
  const double factor = c.rope_scaling->factor, low = c.rope_scaling->low_freq_factor,
               high = c.rope_scaling->high_freq_factor,
               old_len = static_cast<double>(c.rope_scaling->original_max_position_embeddings);
  const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
  for (double& inv : f) {
    const double wavelen = 2 * M_PI / inv;
    const double llama = wavelen > low_freq_wavelen ? inv / factor : inv;
    const double smooth = (old_len / wavelen - low) / (high - low);
    const double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    inv = medium ? smoothed : llama;
  }
  return f;
}

// apply_rotary_pos_emb on x (B, T, heads, D): x·cos + rotate_half(x)·sin at positions t.
inline void rotate(HfVec& x, int64_t B, int64_t T, int64_t heads, int64_t D, const HfVec& freq) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        double* v = x.data() + ((b * T + t) * heads + h) * D;
        HfVec out(static_cast<size_t>(D));
        for (int64_t i = 0; i < D; ++i) {
          const double angle = static_cast<double>(t) * freq[static_cast<size_t>(i % (D / 2))];
          const double rotated = i < D / 2 ? -v[i + D / 2] : v[i - D / 2];
          out[static_cast<size_t>(i)] = v[i] * std::cos(angle) + rotated * std::sin(angle);
        }
        std::copy(out.begin(), out.end(), v);
      }
    }
  }
}

// The gated MLP down(act(x·gateᵀ) · x·upᵀ) on x (rows, d), gate/up (ff, d), down (d, ff); act is
// SiLU, or gelu_pytorch_tanh for Gemma.
inline HfVec gated_mlp(const HfVec& x, int64_t rows, int64_t d, int64_t ff, const HfVec& gate_w,
                       const HfVec& up_w, const HfVec& down_w, bool gelu = false) {
  HfVec gate = linear(x, gate_w, rows, d, ff);
  const HfVec up = linear(x, up_w, rows, d, ff);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = gate[i];
    const double act =
        gelu  // gelu_pytorch_tanh, or silu
            ? 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)))
            : g / (1 + std::exp(-g));
    gate[i] = act * up[i];
  }
  return linear(gate, down_w, rows, ff, d);
}

}  // namespace hf_reference_internal

/// Replaces layer `layer`'s feed-forward block: takes its input (the normed h, (B·T, d)) and
/// returns its output (B·T, d). hf_moe_reference.h's mixture-of-experts blocks.
using HfMlpOverride = std::function<HfVec(int64_t layer, const HfVec& mlp_in)>;

/// The logits (B, T, vocab) of `tokens` (B·T ids, row-major) under the HF tensors `hf`.
/// `mlp`, when given, computes every layer's feed-forward block instead of the dense MLP.
inline HfVec hf_reference_logits(const LlamaConfig& c, const std::map<std::string, HostTensor>& hf,
                                 const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                                 const HfMlpOverride& mlp = nullptr) {
  using namespace hf_reference_internal;
  const int64_t d = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, ff = c.intermediate_size, V = c.vocab_size, N = B * T;
  const double eps = c.rms_norm_eps;
  const HfVec embed = values(hf, "model.embed_tokens.weight");
  HfVec h(static_cast<size_t>(N * d));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < d; ++i) {
      h[static_cast<size_t>(n * d + i)] =
          embed[static_cast<size_t>(tokens[static_cast<size_t>(n)] * d + i)];
    }
  }
  const bool gemma3 = c.family == "gemma3_text";
  const bool gemma = c.family == "gemma" || c.family == "gemma2" || gemma3;
  const bool post_norms = c.family == "gemma2" || gemma3;
  if (gemma) {  // the normalizer sqrt(hidden_size)
    for (double& e : h) e *= std::sqrt(static_cast<double>(d));
  }
  const double scale =
      gemma ? 1.0 / std::sqrt(c.query_pre_attn_scalar) : 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    // Mistral: every layer's window; Gemma 2: the even layers' (is_sliding = not layer_idx % 2);
    // Gemma 3: is_sliding = bool((layer_idx + 1) % sliding_window_pattern).
    const bool sliding = c.family == "gemma2" ? layer % 2 == 0
                         : gemma3             ? (layer + 1) % c.sliding_window_pattern != 0
                                              : true;
    const int64_t window = sliding ? c.sliding_window : 0;
    const HfVec freq = inv_freq(c, gemma3 && sliding);
    const HfVec n = rms_norm(h, d, values(hf, p + "input_layernorm.weight"), eps, gemma);
    const auto proj = [&](const char* name, int64_t out) {
      const std::string w = p + "self_attn." + name + "_proj.";
      const bool bias = hf.count(w + "bias") > 0;
      const HfVec b = bias ? values(hf, w + "bias") : HfVec();
      return linear(n, values(hf, w + "weight"), N, d, out, bias ? &b : nullptr);
    };
    HfVec q = proj("q", H * D), k = proj("k", Hkv * D), v = proj("v", Hkv * D);
    if (hf.count(p + "self_attn.q_norm.weight")) {  // Qwen 3; Gemma 3 with (1 + weight)
      q = rms_norm(q, D, values(hf, p + "self_attn.q_norm.weight"), eps, gemma);
      k = rms_norm(k, D, values(hf, p + "self_attn.k_norm.weight"), eps, gemma);
    }
    rotate(q, B, T, H, D, freq);
    rotate(k, B, T, Hkv, D, freq);
    HfVec a(static_cast<size_t>(N * H * D), 0.0);
    const int64_t groups = H / Hkv;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t head = 0; head < H; ++head) {
        const int64_t kv = head / groups;  // repeat_kv
        for (int64_t t = 0; t < T; ++t) {
          HfVec w(static_cast<size_t>(T), -INFINITY);
          double m = -INFINITY;
          for (int64_t s = 0; s <= t; ++s) {
            if (window > 0 && t - s >= window) continue;
            double dot = 0;
            for (int64_t i = 0; i < D; ++i) {
              dot += q[static_cast<size_t>(((b * T + t) * H + head) * D + i)] *
                     k[static_cast<size_t>(((b * T + s) * Hkv + kv) * D + i)];
            }
            double score = dot * scale;
            if (c.attn_logit_softcapping > 0) {
              score = std::tanh(score / c.attn_logit_softcapping) * c.attn_logit_softcapping;
            }
            w[static_cast<size_t>(s)] = score;
            m = std::max(m, w[static_cast<size_t>(s)]);
          }
          double sum = 0;
          for (double& e : w) sum += (e = std::exp(e - m));
          for (int64_t s = 0; s <= t; ++s) {
            for (int64_t i = 0; i < D; ++i) {
              a[static_cast<size_t>(((b * T + t) * H + head) * D + i)] +=
                  w[static_cast<size_t>(s)] / sum *
                  v[static_cast<size_t>(((b * T + s) * Hkv + kv) * D + i)];
            }
          }
        }
      }
    }
    const std::string o = p + "self_attn.o_proj.";
    const bool o_bias = hf.count(o + "bias") > 0;
    const HfVec ob = o_bias ? values(hf, o + "bias") : HfVec();
    HfVec attn = linear(a, values(hf, o + "weight"), N, H * D, d, o_bias ? &ob : nullptr);
    if (post_norms)
      attn = rms_norm(attn, d, values(hf, p + "post_attention_layernorm.weight"), eps, true);
    for (size_t i = 0; i < h.size(); ++i) h[i] += attn[i];
    const HfVec mlp_in = rms_norm(h, d,
                                  values(hf, p + (post_norms ? "pre_feedforward_layernorm.weight"
                                                             : "post_attention_layernorm.weight")),
                                  eps, gemma);
    HfVec down = mlp ? mlp(layer, mlp_in)
                     : gated_mlp(mlp_in, N, d, ff, values(hf, p + "mlp.gate_proj.weight"),
                                 values(hf, p + "mlp.up_proj.weight"),
                                 values(hf, p + "mlp.down_proj.weight"), gemma);
    if (post_norms)
      down = rms_norm(down, d, values(hf, p + "post_feedforward_layernorm.weight"), eps, true);
    for (size_t i = 0; i < h.size(); ++i) h[i] += down[i];
  }
  const HfVec f = rms_norm(h, d, values(hf, "model.norm.weight"), eps, gemma);
  HfVec logits = linear(f, c.tie_word_embeddings ? embed : values(hf, "lm_head.weight"), N, d, V);
  if (c.final_logit_softcapping > 0) {
    for (double& e : logits)
      e = std::tanh(e / c.final_logit_softcapping) * c.final_logit_softcapping;
  }
  return logits;
}

/// Greedy continuation of one prompt by the reference (argmax of the last position's logits,
/// ties to the lowest id), recomputing the whole sequence each step.
inline std::vector<int32_t> hf_reference_greedy(const LlamaConfig& c,
                                                const std::map<std::string, HostTensor>& hf,
                                                std::vector<int32_t> sequence, int64_t steps) {
  std::vector<int32_t> out;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t T = static_cast<int64_t>(sequence.size());
    const HfVec logits = hf_reference_logits(c, hf, sequence, 1, T);
    const double* last = logits.data() + (T - 1) * c.vocab_size;
    int32_t best = 0;
    for (int32_t i = 1; i < c.vocab_size; ++i) {
      if (last[i] > last[best]) best = i;
    }
    out.push_back(best);
    sequence.push_back(best);
  }
  return out;
}

}  // namespace meshlayout::testing
