// hf_llama_config_json.cc — LlamaConfig::to_json (hf_llama_config.h): the config written as
// transformers writes config.json, every field from_json reads, so the two round-trip.
#include <nlohmann/json.hpp>

#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {
namespace {
using nlohmann::json;
}  // namespace

std::string LlamaConfig::to_json() const {
  validate();
  nlohmann::ordered_json j;
  j["architectures"] = {architecture()};
  j["model_type"] = family;
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_scaling->factor},
        {"low_freq_factor", rope_scaling->low_freq_factor},
        {"high_freq_factor", rope_scaling->high_freq_factor},
        {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (!qwen2_attention()) j["attention_bias"] = attention_bias;
  j["mlp_bias"] = false;
  if (family == "mistral") {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  if (qwen()) {
    const bool sliding = sliding_window > 0;
    j["use_sliding_window"] = sliding;
    if (sliding) {
      j["sliding_window"] = sliding_window;
      j["max_window_layers"] = max_window_layers;
    }
  }
  if (family == "mixtral") {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    j["num_local_experts"] = num_experts;
  }
  if (family == "qwen3_moe" || family == "qwen2_moe") {
    j["num_experts"] = num_experts;
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
  }
  if (family == "qwen2_moe") j["shared_expert_intermediate_size"] = shared_expert_intermediate_size;
  if (moe()) {
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["router_aux_loss_coef"] = router_aux_loss_coef;
    j["output_router_logits"] = output_router_logits;
  }
  if (gemma()) {
    j.erase("hidden_act");
    j["hidden_activation"] = "gelu_pytorch_tanh";
    j["query_pre_attn_scalar"] = query_pre_attn_scalar;
  }
  if (family == "gemma3_text") {
    j["rope_local_base_freq"] = rope_local_base_freq;
    j["sliding_window_pattern"] = sliding_window_pattern;
    if (rope_linear_factor != 1.0) {
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_linear_factor}};
    }
  }
  if (family == "gemma2" || family == "gemma3_text") {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    j["attn_logit_softcapping"] =
        attn_logit_softcapping > 0 ? json(attn_logit_softcapping) : json(nullptr);
    j["final_logit_softcapping"] =
        final_logit_softcapping > 0 ? json(final_logit_softcapping) : json(nullptr);
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["max_position_embeddings"] = max_position_embeddings;
  if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace meshlayout
