// llama_test_util.h — a float64 Llama written from the formulas (HF LlamaForCausalLM /
// keras-hub LlamaCausalLM), fed the model's own gathered weights, for the Llama tests, and the
// RMSNorm backward used by the training reference (llama_train_reference.h). Test-only.
//
// Example:
//   LlamaModel model(config, rules);
//   std::vector<double> want = reference_llama_logits(model, tokens, /*batch=*/2, /*seq=*/5);
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "meshlayout/models/llama.h"
#include "meshlayout/nn/transformer_reference.h"

namespace meshlayout::testing {

/// Megatron's Llama rules on `mesh` (its "model" axis): vocab-parallel embeddings, q/k/v and
/// gate/up column-parallel by heads/columns, attention_output and down row-parallel.
inline LayoutMap megatron_rules(const DeviceMesh& mesh) {
  LayoutMap rules(mesh);
  rules["token_embedding/embeddings"] = TensorLayout({"model", None});
  rules["(query|key|value)/kernel"] = TensorLayout({None, "model", None});
  rules["attention_output/kernel"] = TensorLayout({"model", None, None});
  rules["feedforward_(gate|intermediate)_dense/kernel"] = TensorLayout({None, "model"});
  rules["feedforward_output_dense/kernel"] = TensorLayout({"model", None});
  rules["reverse_embeddings"] = TensorLayout({None, "model"});
  return rules;
}

/// A variable's gathered value in double (F32 widened, F64 as is).
inline Vec gathered(const std::map<std::string, Array*>& vars, const std::string& path) {
  const HostTensor t = vars.at(path)->gather();
  if (t.dtype() == DType::kF64) {
    const double* p = t.data_as<double>();
    return Vec(p, p + num_elements(t.shape()));
  }
  const float* p = t.data_as<float>();
  return Vec(p, p + num_elements(t.shape()));
}

inline Vec ref_rms_norm(const Vec& x, const Vec& scale, int64_t d, double eps) {
  Vec out(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(d); ++r) {
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += x[r * d + c] * x[r * d + c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t c = 0; c < d; ++c)
      out[r * d + c] = x[r * d + c] * inv * scale[static_cast<size_t>(c)];
  }
  return out;
}

/// The backward of ref_rms_norm (y = x·r·scale, r = 1/sqrt(mean(x²) + eps) per row): returns
/// dx = r·scale·dy − x·r³/d·Σ(dy·scale·x) and adds Σ_rows dy·x·r to dscale.
inline Vec ref_rms_norm_backward(const Vec& x, const Vec& scale, const Vec& dy, int64_t d,
                                 double eps, Vec& dscale) {
  Vec dx(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(d); ++r) {
    const double* xr = x.data() + r * d;
    const double* dyr = dy.data() + r * d;
    double ss = 0, dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      ss += xr[c] * xr[c];
      dot += dyr[c] * scale[static_cast<size_t>(c)] * xr[c];
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t c = 0; c < d; ++c) {
      dscale[static_cast<size_t>(c)] += dyr[c] * xr[c] * inv;
      dx[r * d + c] = inv * scale[static_cast<size_t>(c)] * dyr[c] -
                      xr[c] * inv * inv * inv / static_cast<double>(d) * dot;
    }
  }
  return dx;
}

/// Logits (B, T, V) of tokens (row-major B × T) in float64.
inline Vec reference_llama_logits(LlamaModel& model, const std::vector<int32_t>& tokens, int64_t B,
                                  int64_t T) {
  const LlamaConfig& c = model.config();
  const auto vars = model.variables_by_path();
  const int64_t d = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim;
  const int64_t ff = c.intermediate_size, V = c.vocab_size, rows = B * T;
  const Vec emb = gathered(vars, "token_embedding/embeddings");
  Vec x(static_cast<size_t>(rows * d));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(emb.begin() + tokens[static_cast<size_t>(r)] * d,
              emb.begin() + (tokens[static_cast<size_t>(r)] + 1) * d, x.begin() + r * d);
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "transformer_layer_" + std::to_string(i) + "/";
    const Vec n =
        ref_rms_norm(x, gathered(vars, p + "self_attention_layernorm/scale"), d, c.rms_norm_eps);
    Vec q = ref_matmul(n, gathered(vars, p + "self_attention/query/kernel"), rows, d, H * D);
    Vec k = ref_matmul(n, gathered(vars, p + "self_attention/key/kernel"), rows, d, Hkv * D);
    const Vec v =
        ref_matmul(n, gathered(vars, p + "self_attention/value/kernel"), rows, d, Hkv * D);
    ref_rope(q, B, T, H, D, 0, c.rope_theta);
    ref_rope(k, B, T, Hkv, D, 0, c.rope_theta);
    const Vec o = ref_causal_attention(q, k, v, B, T, H, Hkv, D);
    const Vec a =
        ref_matmul(o, gathered(vars, p + "self_attention/attention_output/kernel"), rows, H * D, d);
    for (size_t e = 0; e < x.size(); ++e) x[e] += a[e];
    const Vec m =
        ref_rms_norm(x, gathered(vars, p + "feedforward_layernorm/scale"), d, c.rms_norm_eps);
    Vec g = ref_matmul(m, gathered(vars, p + "feedforward_gate_dense/kernel"), rows, d, ff);
    const Vec u =
        ref_matmul(m, gathered(vars, p + "feedforward_intermediate_dense/kernel"), rows, d, ff);
    for (size_t e = 0; e < g.size(); ++e) g[e] = g[e] / (1.0 + std::exp(-g[e])) * u[e];
    const Vec f = ref_matmul(g, gathered(vars, p + "feedforward_output_dense/kernel"), rows, ff, d);
    for (size_t e = 0; e < x.size(); ++e) x[e] += f[e];
  }
  x = ref_rms_norm(x, gathered(vars, "sequence_output_layernorm/scale"), d, c.rms_norm_eps);
  if (!c.tie_word_embeddings)
    return ref_matmul(x, gathered(vars, "token_embedding/reverse_embeddings"), rows, d, V);
  Vec et(static_cast<size_t>(d * V));
  for (int64_t r = 0; r < V; ++r) {
    for (int64_t e = 0; e < d; ++e)
      et[static_cast<size_t>(e * V + r)] = emb[static_cast<size_t>(r * d + e)];
  }
  return ref_matmul(x, et, rows, d, V);
}

/// Greedy continuation of one prompt by the float64 reference (the whole sequence rerun per step).
inline std::vector<int32_t> reference_greedy(LlamaModel& model, std::vector<int32_t> tokens,
                                             int64_t steps) {
  std::vector<int32_t> out;
  const int64_t V = model.config().vocab_size;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t T = static_cast<int64_t>(tokens.size());
    const Vec logits = reference_llama_logits(model, tokens, 1, T);
    const double* row = logits.data() + (T - 1) * V;
    const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
    out.push_back(best);
    tokens.push_back(best);
  }
  return out;
}

}  // namespace meshlayout::testing
