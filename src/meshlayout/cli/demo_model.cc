// demo_model.cc — see demo_model.h.
#include "meshlayout/cli/demo_model.h"

#include <fmt/format.h>

namespace meshlayout::cli {

LlamaConfig demo_llama_config(const std::string& family) {
  LlamaConfig c{.vocab_size = 512,
                .hidden_size = 128,
                .intermediate_size = 256,
                .num_hidden_layers = 2,
                .num_attention_heads = 8,
                .num_key_value_heads = 2,
                .head_dim = 16,
                .rms_norm_eps = 1e-5,
                .rope_theta = 10000.0,
                .tie_word_embeddings = true,
                .max_position_embeddings = 64};
  c.family = family;
  if (family == "mistral") c.sliding_window = 4;
  if (family == "qwen3") c.head_dim = 24;
  if (family == "gemma" || family == "gemma2" || family == "gemma3_text") {
    c.query_pre_attn_scalar = 16;
  }
  if (family == "gemma3_text") {  // layer 0 sliding with the local rope, layer 1 global
    c.tie_word_embeddings = false;
    c.sliding_window = 4;
    c.sliding_window_pattern = 2;
    c.rope_local_base_freq = 10000;
    c.rope_theta = 1e6;
    c.rope_linear_factor = 8;
  }
  if (family == "mixtral") {  // four experts, two per token, every layer sparse
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.norm_topk_prob = true;
  }
  if (family == "qwen3_moe") {  // eight small experts; layer 0 dense (mlp_only_layers)
    c.head_dim = 24;
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 64;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {0};
  }
  if (family == "qwen2_moe") {  // eight small experts and a shared expert; layer 0 dense
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 64;
    c.shared_expert_intermediate_size = 128;
    c.mlp_only_layers = {0};
  }
  if (family == "gemma2") {
    // Untied here: with tied embeddings, random weights and post norms holding each block's
    // output to unit size, the scaled embedding dominates and every step repeats the last token.
    c.tie_word_embeddings = false;
    c.sliding_window = 4;
    c.attn_logit_softcapping = 50.0;
    c.final_logit_softcapping = 30.0;
  }
  c.validate();
  return c;
}

std::string demo_family_story(const LlamaConfig& c) {
  if (c.family == "mistral") {
    return fmt::format("Mistral (MistralForCausalLM), sliding window of {} keys", c.sliding_window);
  }
  if (c.family == "qwen2") return "Qwen 2 (Qwen2ForCausalLM), q/k/v biases";
  if (c.family == "qwen3") {
    return fmt::format("Qwen 3 (Qwen3ForCausalLM), q/k head norms, head_dim {} != {} / {}",
                       c.head_dim, c.hidden_size, c.num_attention_heads);
  }
  if (c.family == "gemma") return "Gemma (GemmaForCausalLM), keras-hub's Gemma block";
  if (c.family == "mixtral") {
    return fmt::format("Mixtral (MixtralForCausalLM), {} experts per layer, top-{}", c.num_experts,
                       c.num_experts_per_tok);
  }
  if (c.family == "qwen3_moe") {
    return fmt::format(
        "Qwen 3 MoE (Qwen3MoeForCausalLM), {} experts of {} on layer 1, top-{}, layer 0 dense",
        c.num_experts, c.moe_intermediate_size, c.num_experts_per_tok);
  }
  if (c.family == "qwen2_moe") {
    return fmt::format(
        "Qwen 2 MoE (Qwen2MoeForCausalLM), {} experts of {} and a gated shared expert of {} on "
        "layer 1, top-{}, layer 0 dense",
        c.num_experts, c.moe_intermediate_size, c.shared_expert_intermediate_size,
        c.num_experts_per_tok);
  }
  if (c.family == "gemma3_text") {
    return "Gemma 3 (Gemma3ForCausalLM), q/k norms, a local-rope sliding layer and a global one";
  }
  if (c.family == "gemma2") {
    return fmt::format(
        "Gemma 2 (Gemma2ForCausalLM), post norms, soft caps {} and {}, window of {} on layer 0",
        c.attn_logit_softcapping, c.final_logit_softcapping, c.sliding_window);
  }
  return "Llama (LlamaForCausalLM)";
}

std::string demo_backbone_name(const LlamaConfig& c) {
  if (c.family == "qwen3_moe") return "Qwen3Moe";
  if (c.family == "qwen2_moe") return "QwenMoe";
  if (c.family == "mixtral") return "Mixtral";
  if (c.family == "qwen2" || c.family == "qwen3") return "Qwen";
  if (c.gemma()) return "Gemma";
  if (c.family == "mistral") return "Mistral";
  return "Llama";
}

LayoutMap demo_megatron_rules(const DeviceMesh& mesh, const LlamaConfig& config) {
  LayoutMap rules(mesh, MatchMode::kSearch);
  if (config.gemma()) {  // keras-hub's Gemma names, q/k/v kernels heads first
    rules["token_embedding/embeddings"] = {"model", None};
    rules["decoder_block.*attention.*(query|key|value).kernel"] = {"model", None, None};
    rules["decoder_block.*attention_output.kernel"] = {"model", None, None};
    rules["decoder_block.*ffw_gating.*kernel"] = {None, "model"};
    rules["decoder_block.*ffw_linear.kernel"] = {"model", None};
    return rules;
  }
  if (config.qkv_bias()) {
    rules["transformer_layer.*self_attention.*(query|key|value).bias"] = {"model", None};
  }
  if (config.moe()) {  // expert parallelism: each device of the model axis holds its experts
    rules["experts/expert_feedforward_.*"] = {"model", None, None};
    rules["token_embedding/embeddings"] = {"model", None};
    rules["token_embedding/reverse_embeddings"] = {None, "model"};
    rules["transformer_layer.*self_attention.*(query|key|value).kernel"] = {None, "model", None};
    rules["transformer_layer.*attention_output.kernel"] = {"model", None, None};
    rules["transformer_layer_[0-9]+/feedforward_(gate|intermediate)_dense.kernel"] = {None,
                                                                                      "model"};
    rules["transformer_layer_[0-9]+/feedforward_output_dense.kernel"] = {"model", None};
    if (config.shared_expert_intermediate_size > 0) {  // Qwen 2 MoE: the shared expert as an MLP
      rules["shared_expert_dense/feedforward_(gate|intermediate)_dense.kernel"] = {None, "model"};
      rules["shared_expert_dense/feedforward_output_dense.kernel"] = {"model", None};
    }
    return rules;
  }
  rules["token_embedding/embeddings"] = {"model", None};
  rules["token_embedding/reverse_embeddings"] = {None, "model"};
  rules["transformer_layer.*self_attention.*(query|key|value).kernel"] = {None, "model", None};
  rules["transformer_layer.*attention_output.kernel"] = {"model", None, None};
  rules["transformer_layer.*feedforward_(gate|intermediate)_dense.kernel"] = {None, "model"};
  rules["transformer_layer.*feedforward_output_dense.kernel"] = {"model", None};
  return rules;
}

}  // namespace meshlayout::cli
