// hf_moe_reference.h — (test-only) the float64 forward and training loss of the mixture-of-experts
// decoders (Mixtral, Qwen2-MoE, Qwen3-MoE) written from Hugging Face's modelling code
// (modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py) on the Hugging Face
// tensors by their names (random_moe_hf.h), independent of meshlayout's layers. Attention,
// norms, RoPE (Mistral's window, Qwen 2's q/k/v biases, Qwen 3's q/k norms) are
// hf_decoder_reference.h's; the feed-forward block of a MoE layer (Mixtral/Qwen2Moe/
// Qwen3MoeSparseMoeBlock) on x (N, d) is:
//   router_logits = x · gate.weightᵀ (N, E);  p = softmax(router_logits)
//   top-k of p per token (k = num_experts_per_tok; equal values: the lower expert index first,
//   as torch.topk returns them); w = the k values, divided by their sum when the spec
//   renormalizes() (Mixtral always; Qwen when norm_topk_prob)
//   out = Σ_selected w · down_e(silu(gate_e(x)) · up_e(x))
//   qwen2_moe: out += sigmoid(x · shared_expert_gate.weightᵀ) · shared_expert(x)
// Dense layers (Qwen: mlp_only_layers, decoder_sparse_step; HfMoeSpec::is_moe_layer) use
// mlp.{gate,up,down}_proj. The loss (…ForCausalLM with output_router_logits and labels):
//   ce  = mean over the B·T positions of −log softmax(logits)[target]
//   aux = load_balancing_loss_func(router logits of every MoE layer concatenated, E, k) with
//         no attention mask: p = softmax, one-hot of the top-k (N_all, k, E);
//         tokens_per_expert = mean over tokens of the one-hot (k, E);
//         router_prob_per_expert = mean over tokens of p (E);
//         aux = E · Σ_{k,E} tokens_per_expert · router_prob_per_expert
//   total = ce + router_aux_loss_coef · aux
//
// Example:
//   HfMoeSpec spec = small_hf_moe_spec("mixtral");
//   auto hf = random_hf_moe_tensors(spec, 7);
//   HfVec logits = hf_moe_reference_logits(spec, hf, tokens, /*B=*/2, /*T=*/5);  // (B, T, V)
//   HfMoeLoss l = hf_moe_reference_loss(spec, hf, inputs, targets, 2, 5);      // ce, aux, total
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/models/hf_decoder_reference.h"
#include "meshlayout/models/random_moe_hf.h"

namespace meshlayout::testing {

/// The forward's results: logits and what the routers saw.
struct HfMoeForward {
  HfVec logits;                      // (B, T, vocab)
  std::vector<HfVec> router_logits;  // per MoE layer, in layer order: (B·T, num_experts)
  std::vector<int64_t> moe_layers;   // the layer index of each router_logits entry
  /// The smallest gap between the k-th and (k+1)-th routing probability of any token in any
  /// MoE layer (infinity when k = num_experts): a float32 forward picks the same experts when
  /// this is well above its rounding.
  double min_top_k_margin = std::numeric_limits<double>::infinity();
};

namespace hf_moe_internal {

/// softmax over each row of `n`.
inline HfVec softmax_rows(const HfVec& x, int64_t n) {
  HfVec y(x.size());
  for (size_t r = 0; r < x.size(); r += static_cast<size_t>(n)) {
    const double m = *std::max_element(x.begin() + static_cast<ptrdiff_t>(r),
                                       x.begin() + static_cast<ptrdiff_t>(r) + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (y[r + static_cast<size_t>(i)] = std::exp(x[r + i] - m));
    for (int64_t i = 0; i < n; ++i) y[r + static_cast<size_t>(i)] /= sum;
  }
  return y;
}

/// The indices of the k largest of p[0, n), largest first; equal values: lower index first.
inline std::vector<int64_t> top_k(const double* p, int64_t n, int64_t k) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

/// Layer `layer`'s feed-forward block on x (N, d); a MoE layer appends its router logits to
/// `out` and lowers out.min_top_k_margin.
inline HfVec moe_block(const HfMoeSpec& s, const std::map<std::string, HostTensor>& hf,
                       int64_t layer, const HfVec& x, HfMoeForward& out) {
  using hf_reference_internal::gated_mlp;
  using hf_reference_internal::linear;
  using hf_reference_internal::values;
  const int64_t d = s.base.hidden_size, N = static_cast<int64_t>(x.size()) / d;
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  if (!s.is_moe_layer(layer)) {
    return gated_mlp(x, N, d, s.base.intermediate_size, values(hf, p + "mlp.gate_proj.weight"),
                     values(hf, p + "mlp.up_proj.weight"), values(hf, p + "mlp.down_proj.weight"));
  }
  const bool mixtral = s.base.family == "mixtral";
  const std::string m = p + (mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t E = s.num_experts, k = s.num_experts_per_tok, ff = s.expert_intermediate_size();
  HfVec logits = linear(x, values(hf, m + "gate.weight"), N, d, E);
  const HfVec prob = softmax_rows(logits, E);
  HfVec y(x.size(), 0.0);
  // Each token's selected experts and weights, then each expert on its tokens (as the
  // modelling code's loop over experts; the sum is the same in any order up to rounding).
  std::vector<std::vector<std::pair<int64_t, double>>> chosen(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const double* pn = prob.data() + n * E;
    const std::vector<int64_t> top = top_k(pn, E, k);
    if (k < E) {
      const std::vector<int64_t> next = top_k(pn, E, k + 1);
      out.min_top_k_margin = std::min(out.min_top_k_margin, pn[top.back()] - pn[next.back()]);
    }
    double sum = 0;
    for (const int64_t e : top) sum += pn[e];
    for (const int64_t e : top)
      chosen[static_cast<size_t>(e)].push_back({n, s.renormalizes() ? pn[e] / sum : pn[e]});
  }
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = chosen[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const std::string x_e = m + "experts." + std::to_string(e) + ".";
    HfVec xs;
    for (const auto& [n, w] : rows) xs.insert(xs.end(), x.begin() + n * d, x.begin() + (n + 1) * d);
    const int64_t R = static_cast<int64_t>(rows.size());
    const HfVec ye =
        gated_mlp(xs, R, d, ff, values(hf, x_e + (mixtral ? "w1.weight" : "gate_proj.weight")),
                  values(hf, x_e + (mixtral ? "w3.weight" : "up_proj.weight")),
                  values(hf, x_e + (mixtral ? "w2.weight" : "down_proj.weight")));
    for (int64_t r = 0; r < R; ++r) {
      const auto [n, w] = rows[static_cast<size_t>(r)];
      for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>(n * d + i)] += w * ye[r * d + i];
    }
  }
  if (s.base.family == "qwen2_moe") {
    const int64_t fs = s.shared_expert_intermediate_size;
    const HfVec shared = gated_mlp(x, N, d, fs, values(hf, m + "shared_expert.gate_proj.weight"),
                                   values(hf, m + "shared_expert.up_proj.weight"),
                                   values(hf, m + "shared_expert.down_proj.weight"));
    const HfVec g = linear(x, values(hf, m + "shared_expert_gate.weight"), N, d, 1);
    for (int64_t n = 0; n < N; ++n) {
      const double sig = 1.0 / (1.0 + std::exp(-g[static_cast<size_t>(n)]));
      for (int64_t i = 0; i < d; ++i)
        y[static_cast<size_t>(n * d + i)] += sig * shared[static_cast<size_t>(n * d + i)];
    }
  }
  out.router_logits.push_back(std::move(logits));
  out.moe_layers.push_back(layer);
  return y;
}

}  // namespace hf_moe_internal

/// The forward of `tokens` (B·T ids, row-major) under the HF tensors `hf` of `spec`'s model.
inline HfMoeForward hf_moe_reference_forward(const HfMoeSpec& spec,
                                             const std::map<std::string, HostTensor>& hf,
                                             const std::vector<int32_t>& tokens, int64_t B,
                                             int64_t T) {
  spec.validate();
  HfMoeForward out;
  out.logits = hf_reference_logits(spec.base, hf, tokens, B, T, [&](int64_t layer, const HfVec& x) {
    return hf_moe_internal::moe_block(spec, hf, layer, x, out);
  });
  return out;
}

/// The logits (B, T, vocab).
inline HfVec hf_moe_reference_logits(const HfMoeSpec& spec,
                                     const std::map<std::string, HostTensor>& hf,
                                     const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  return hf_moe_reference_forward(spec, hf, tokens, B, T).logits;
}

/// transformers' load_balancing_loss_func(router_logits, num_experts, top_k) without an
/// attention mask; 0 when there are no MoE layers (no router logits).
inline double hf_load_balancing_loss(const std::vector<HfVec>& router_logits, int64_t E,
                                     int64_t k) {
  HfVec all;
  for (const HfVec& l : router_logits) all.insert(all.end(), l.begin(), l.end());
  if (all.empty()) return 0;
  const int64_t N = static_cast<int64_t>(all.size()) / E;
  const HfVec p = hf_moe_internal::softmax_rows(all, E);
  HfVec tokens_per_expert(static_cast<size_t>(k * E), 0.0), prob_per_expert(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<int64_t> top = hf_moe_internal::top_k(p.data() + n * E, E, k);
    for (int64_t j = 0; j < k; ++j)
      tokens_per_expert[static_cast<size_t>(j * E + top[static_cast<size_t>(j)])] += 1.0 / N;
    for (int64_t e = 0; e < E; ++e)
      prob_per_expert[static_cast<size_t>(e)] += p[static_cast<size_t>(n * E + e)] / N;
  }
  double loss = 0;
  for (int64_t j = 0; j < k; ++j)
    for (int64_t e = 0; e < E; ++e)
      loss += tokens_per_expert[static_cast<size_t>(j * E + e)] *
              prob_per_expert[static_cast<size_t>(e)];
  return loss * static_cast<double>(E);
}

struct HfMoeLoss {
  double ce = 0;     // mean cross-entropy over the B·T positions
  double aux = 0;    // load-balancing loss over every MoE layer's B·T router logits
  double total = 0;  // ce + router_aux_loss_coef · aux
};

/// The training loss of `inputs` (B·T ids) against `targets` (B·T ids), meshlayout's convention
/// (inputs row[:-1], targets row[1:]); HF: the CausalLM's loss with output_router_logits on
/// `inputs`, when its labels shift onto `targets`.
inline HfMoeLoss hf_moe_reference_loss(const HfMoeSpec& spec,
                                       const std::map<std::string, HostTensor>& hf,
                                       const std::vector<int32_t>& inputs,
                                       const std::vector<int32_t>& targets, int64_t B, int64_t T) {
  const HfMoeForward f = hf_moe_reference_forward(spec, hf, inputs, B, T);
  const int64_t V = spec.base.vocab_size, N = B * T;
  HfMoeLoss l;
  for (int64_t n = 0; n < N; ++n) {
    const double* row = f.logits.data() + n * V;
    const double m = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
    l.ce += (m + std::log(sum) - row[targets[static_cast<size_t>(n)]]) / static_cast<double>(N);
  }
  l.aux = hf_load_balancing_loss(f.router_logits, spec.num_experts, spec.num_experts_per_tok);
  l.total = l.ce + spec.router_aux_loss_coef * l.aux;
  return l;
}

/// Greedy continuation of one prompt (argmax of the last position, ties to the lowest id),
/// recomputing the whole sequence each step.
inline std::vector<int32_t> hf_moe_reference_greedy(const HfMoeSpec& spec,
                                                    const std::map<std::string, HostTensor>& hf,
                                                    std::vector<int32_t> sequence, int64_t steps) {
  std::vector<int32_t> out;
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t T = static_cast<int64_t>(sequence.size());
    const HfVec logits = hf_moe_reference_logits(spec, hf, sequence, 1, T);
    const double* last = logits.data() + (T - 1) * spec.base.vocab_size;
    const int32_t best =
        static_cast<int32_t>(std::max_element(last, last + spec.base.vocab_size) - last);
    out.push_back(best);
    sequence.push_back(best);
  }
  return out;
}

}  // namespace meshlayout::testing
