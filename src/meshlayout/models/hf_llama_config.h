// hf_llama_config.h — LlamaConfig: the Hugging Face config.json of a Llama-style decoder, read
// strictly (defaults as transformers' config classes; anything meshlayout cannot run is refused
// with the field, its value and what is supported) and written back. The families it covers
// share keras-hub's Llama block and differ by a few fields:
//   llama   LlamaForCausalLM   (Llama 2, Llama 3/3.1 with rope_scaling type "llama3";
//                               attention_bias: q/k/v/o biases)
//   mistral MistralForCausalLM (sliding_window)
//   qwen2   Qwen2ForCausalLM   (Qwen 2 / 2.5: q/k/v biases, no output bias)
//   qwen3   Qwen3ForCausalLM   (Qwen 3: per-head RMS norms of q and k; attention_bias)
//   gemma   GemmaForCausalLM   (keras-hub's Gemma block: decoder_block_{i}, GeGLU, RMSNorm with
//                               1 + scale, embeddings times sqrt(hidden_size), tied)
//   gemma2  Gemma2ForCausalLM  (and post-attention/post-feed-forward norms, attention and
//                               final-logit soft-capping, query_pre_attn_scalar, a sliding
//                               window on every other layer)
//   mixtral MixtralForCausalLM (Mistral's block with a mixture of experts: a top-k router over
//                               num_local_experts SwiGLU experts, weights renormalised)
//   qwen3_moe Qwen3MoeForCausalLM (Qwen 3's block; experts of moe_intermediate_size on the
//                               layers decoder_sparse_step / mlp_only_layers choose, top-k
//                               weights renormalised when norm_topk_prob)
//   qwen2_moe Qwen2MoeForCausalLM (Qwen 2's block, q/k/v biases; Qwen 3 MoE's experts plus a
//                               shared expert of shared_expert_intermediate_size on every
//                               sparse layer, gated by sigmoid(x · shared_expert_gate))
// Qwen 2/3 may also use a sliding window (use_sliding_window) on layers from max_window_layers.
// head_dim may differ from hidden_size / num_attention_heads (Qwen 3, Mistral Nemo).
//
// Example:
//   LlamaConfig c = LlamaConfig::from_file("llama/config.json");
//   c.num_key_value_heads;          // num_attention_heads when the file does not say
//   c.family == "qwen2";            // from `architectures` / `model_type`
//   LlamaConfig tiny{.vocab_size = 64, .hidden_size = 16, .intermediate_size = 32,
//                    .num_hidden_layers = 2, .num_attention_heads = 4,
//                    .num_key_value_heads = 2, .head_dim = 4};
//   tiny.validate();                // ValueError naming the field when a value is refused
//   std::string json = tiny.to_json();
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/kernels/rope.h"

namespace meshlayout {

/// The Llama-style families LlamaConfig reads, as config.json's model_type names them.
inline constexpr std::string_view kLlamaFamilies[] = {
    "llama",  "mistral",     "qwen2",   "qwen3",     "gemma",
    "gemma2", "gemma3_text", "mixtral", "qwen3_moe", "qwen2_moe"};

struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // config.json default: num_attention_heads
  int64_t head_dim = 0;             // config.json default: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;  // top-level rope_theta, or rope_parameters.rope_theta
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 2048;
  std::string torch_dtype;  // informational ("bfloat16", …); empty when absent
  /// model_type: "llama", "mistral", "qwen2" or "qwen3" (kLlamaFamilies).
  std::string family = "llama";
  /// Llama 3's rope_scaling (rope_type "llama3"), when the file has one.
  std::optional<Llama3RopeScaling> rope_scaling;
  /// attention_bias (llama, qwen3): biases on q, k, v and o. Qwen 2 always has q/k/v biases.
  bool attention_bias = false;
  /// Mistral's sliding_window (every layer) or Gemma 2's (layers 0, 2, 4, …); 0: none.
  int64_t sliding_window = 0;
  /// Gemma: scores scaled by query_pre_attn_scalar^(−1/2) (Gemma 1: head_dim).
  double query_pre_attn_scalar = 0;
  /// Gemma 2: attn_logit_softcapping and final_logit_softcapping (0: none).
  double attn_logit_softcapping = 0;
  double final_logit_softcapping = 0;
  /// Gemma 3: the sliding layers' rope theta (rope_local_base_freq), every
  /// sliding_window_pattern-th layer global (full attention, rope_theta divided by a "linear"
  /// rope_scaling factor).
  double rope_local_base_freq = 0;
  int64_t sliding_window_pattern = 0;
  double rope_linear_factor = 1.0;
  /// Qwen's use_sliding_window: the window applies to layers max_window_layers and above.
  int64_t max_window_layers = 0;
  /// Mixture of experts (mixtral, qwen3_moe): experts per sparse layer (0: a dense model), how
  /// many each token uses, their hidden size (Qwen's moe_intermediate_size; Mixtral's experts
  /// use intermediate_size), whether the chosen weights are renormalised, and the auxiliary
  /// load-balancing loss added to training's loss (coefficient times transformers'
  /// load_balancing_loss_func) when output_router_logits is true.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  /// Qwen MoE: layer i is sparse when i is not in mlp_only_layers and (i + 1) is a multiple of
  /// decoder_sparse_step; the other layers have a dense feed-forward of intermediate_size.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  /// Qwen 2 MoE: the shared expert's hidden size on every sparse layer (0: none).
  int64_t shared_expert_intermediate_size = 0;

  /// keras-hub's Gemma block and names (gemma, gemma2, gemma3_text).
  bool gemma() const { return family == "gemma" || family == "gemma2" || family == "gemma3_text"; }
  /// Gemma 2 and 3's post-attention and post-feed-forward norms.
  bool post_norms() const { return family == "gemma2" || family == "gemma3_text"; }
  /// Whether layer i attends through the sliding window.
  bool sliding_layer(int64_t i) const {
    if (family == "gemma2") return i % 2 == 0;
    if (family == "gemma3_text") return (i + 1) % sliding_window_pattern != 0;
    if (qwen()) return i >= max_window_layers;
    return true;
  }
  /// Qwen 2 / 3 and Qwen 2 / 3 MoE (Qwen's config fields).
  bool qwen() const {
    return family == "qwen2" || family == "qwen3" || family == "qwen3_moe" || family == "qwen2_moe";
  }
  /// Qwen 2's attention (q/k/v biases, no attention_bias field): qwen2 and qwen2_moe.
  bool qwen2_attention() const { return family == "qwen2" || family == "qwen2_moe"; }
  /// A mixture-of-experts family.
  bool moe() const { return num_experts > 0; }
  /// Whether layer i's feed-forward is the mixture of experts.
  bool sparse_layer(int64_t i) const {
    if (!moe()) return false;
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) != mlp_only_layers.end()) {
      return false;
    }
    return (i + 1) % decoder_sparse_step == 0;
  }
  /// keras-hub's automatic name of layer i's sparse block: "mixtral_sparse_moe_block" (or
  /// "qwen3_sparse_moe_block", "qwen_sparse_moe_block"), then _1, _2, … for the later sparse
  /// layers.
  std::string sparse_block_name(int64_t i) const;
  /// The experts' hidden size.
  int64_t expert_intermediate_size() const {
    return family == "mixtral" ? intermediate_size : moe_intermediate_size;
  }
  /// The sliding window of layer i (0: full attention).
  int64_t window_of_layer(int64_t i) const { return sliding_layer(i) ? sliding_window : 0; }
  /// The rotary embedding of layer i (Gemma 3: local or global).
  Rope rope_of_layer(int64_t i) const;
  /// The attention scores' scale: 0 (1/sqrt(head_dim)) except for Gemma.
  double attention_scale() const;

  /// q/k/v projections with biases: attention_bias, or the qwen2 / qwen2_moe families.
  bool qkv_bias() const { return attention_bias || qwen2_attention(); }
  /// The output projection with a bias: attention_bias (never for qwen2 / qwen2_moe).
  bool output_bias() const { return attention_bias && !qwen2_attention(); }
  /// Per-head RMS norms of q and k: Qwen 3's, or Gemma 3's (named query_norm, 1 + scale).
  bool qk_norm() const {
    return family == "qwen3" || family == "qwen3_moe" || family == "gemma3_text";
  }
  /// The Hugging Face class of the family: "LlamaForCausalLM", "Qwen2ForCausalLM", …
  std::string architecture() const;

  /// Parses config.json text. `source` names the file in messages. ValueError (naming the
  /// field, its value and what is expected) for: an `architectures` list naming none of the
  /// families' classes, a `model_type` that is not one of kLlamaFamilies or contradicts
  /// `architectures`, a missing required size, a size that is not a positive integer,
  /// num_attention_heads not a multiple of num_key_value_heads, a rope scaling other than
  /// "llama3" (or one lacking a field), MLP biases, Qwen's use_sliding_window, a hidden_act
  /// other than "silu", and fields of the wrong JSON type.
  static LlamaConfig from_json(std::string_view text, std::string_view source = "config.json");
  /// Reads and parses `path`. NotFoundError naming the path when it does not exist.
  static LlamaConfig from_file(const std::string& path);

  /// The same checks on the values of this struct (a hand-built config). ValueError naming
  /// the field and its value.
  void validate() const;
  /// config.json text of a LlamaForCausalLM (2-space indented, ends with a newline) that
  /// from_json() reads back to an equal config.
  std::string to_json() const;

  friend bool operator==(const LlamaConfig&, const LlamaConfig&) = default;
};

}  // namespace meshlayout
