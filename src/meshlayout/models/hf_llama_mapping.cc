// hf_llama_mapping.cc — hf_llama_weight_mappings (hf_llama_checkpoint.h): which Hugging Face
// tensor backs which keras-hub variable, with the view and permutation between their shapes,
// for every family LlamaConfig reads.
#include <fmt/format.h>

#include "meshlayout/models/hf_llama_checkpoint.h"

namespace meshlayout {

std::vector<HfWeightMapping> hf_llama_weight_mappings(const LlamaConfig& c) {
  c.validate();
  const int64_t vocab = c.vocab_size, d = c.hidden_size, ff = c.intermediate_size;
  const int64_t hq = c.num_attention_heads, hkv = c.num_key_value_heads, hd = c.head_dim;
  std::vector<HfWeightMapping> out;
  auto add = [&](std::string keras_path, std::string hf_name, Shape hf_shape, Shape view_shape,
                 std::vector<int> perm, std::string fields) {
    Shape keras_shape;
    for (int p : perm) keras_shape.push_back(view_shape[static_cast<size_t>(p)]);
    out.push_back(HfWeightMapping{std::move(keras_path), std::move(hf_name), std::move(hf_shape),
                                  std::move(view_shape), std::move(perm), std::move(keras_shape),
                                  std::move(fields)});
  };
  const std::string d_fields = fmt::format("(hidden_size,) = ({},)", d);
  add("token_embedding/embeddings", "model.embed_tokens.weight", {vocab, d}, {vocab, d}, {0, 1},
      fmt::format("(vocab_size, hidden_size) = ({}, {})", vocab, d));
  // keras-hub's names: LlamaBackbone's, or GemmaBackbone's, whose q/k/v kernels are stored heads
  // first, (heads, d, head_dim) instead of (d, heads, head_dim).
  const bool gemma = c.gemma();
  const std::string block = gemma ? "decoder_block_" : "transformer_layer_";
  const std::string attention = gemma ? "attention/" : "self_attention/";
  const std::vector<int> qkv_perm = gemma ? std::vector<int>{0, 2, 1} : std::vector<int>{2, 0, 1};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string k = block + std::to_string(i) + "/";
    const std::string h = fmt::format("model.layers.{}.", i);
    add(k + (gemma ? "pre_attention_norm" : "self_attention_layernorm") + "/scale",
        h + "input_layernorm.weight", {d}, {d}, {0}, d_fields);
    for (const char* proj : {"q", "k", "v"}) {
      const bool query = proj[0] == 'q';
      const int64_t heads = query ? hq : hkv;
      const char* heads_field = query ? "num_attention_heads" : "num_key_value_heads";
      const std::string name = query ? "query" : proj[0] == 'k' ? "key" : "value";
      add(k + attention + name + "/kernel", h + "self_attn." + proj + "_proj.weight",
          {heads * hd, d}, {heads, hd, d}, qkv_perm,
          fmt::format("({}*head_dim, hidden_size) = ({}*{}, {})", heads_field, heads, hd, d));
      if (c.qkv_bias()) {  // (heads*head_dim,) → keras (heads, head_dim)
        add(k + attention + name + "/bias", h + "self_attn." + proj + "_proj.bias", {heads * hd},
            {heads, hd}, {0, 1}, fmt::format("({}*head_dim,) = ({}*{},)", heads_field, heads, hd));
      }
      if (c.qk_norm() && proj[0] != 'v') {  // Qwen 3's / Gemma 3's q_norm, k_norm
        add(k + attention + name + (gemma ? "_norm" : "_dense_layernorm") + "/scale",
            h + "self_attn." + proj + "_norm.weight", {hd}, {hd}, {0},
            fmt::format("(head_dim,) = ({},)", hd));
      }
    }
    add(k + attention + "attention_output/kernel", h + "self_attn.o_proj.weight", {d, hq * hd},
        {d, hq, hd}, {1, 2, 0},
        fmt::format("(hidden_size, num_attention_heads*head_dim) = ({}, {}*{})", d, hq, hd));
    if (c.output_bias()) {
      add(k + attention + "attention_output/bias", h + "self_attn.o_proj.bias", {d}, {d}, {0},
          d_fields);
    }
    if (c.post_norms()) {  // Gemma 2 / 3: post_attention_layernorm is the post-attention norm
      add(k + "post_attention_norm/scale", h + "post_attention_layernorm.weight", {d}, {d}, {0},
          d_fields);
      add(k + "pre_ffw_norm/scale", h + "pre_feedforward_layernorm.weight", {d}, {d}, {0},
          d_fields);
      add(k + "post_ffw_norm/scale", h + "post_feedforward_layernorm.weight", {d}, {d}, {0},
          d_fields);
    } else {  // the others: post_attention_layernorm is the pre-feed-forward norm
      add(k + (gemma ? "pre_ffw_norm" : "feedforward_layernorm") + "/scale",
          h + "post_attention_layernorm.weight", {d}, {d}, {0}, d_fields);
    }
    if (c.sparse_layer(i)) {  // the router, then each expert's three projections
      const int64_t experts = c.num_experts, f = c.expert_intermediate_size();
      const bool mixtral = c.family == "mixtral";
      const std::string kb = k + c.sparse_block_name(i) + "/";
      const std::string hb = h + (mixtral ? "block_sparse_moe." : "mlp.");
      const std::string ff_field = mixtral ? "intermediate_size" : "moe_intermediate_size";
      add(kb + "sparse_feedforward_gate_dense/kernel", hb + "gate.weight", {experts, d},
          {experts, d}, {1, 0}, fmt::format("(num_experts, hidden_size) = ({}, {})", experts, d));
      const auto expert = [&](const char* keras, std::string hf, Shape hf_shape, Shape stacked,
                              std::string fields, int64_t e) {
        Shape view{1};
        view.insert(view.end(), hf_shape.begin(), hf_shape.end());
        add(kb + "experts/" + keras, std::move(hf), std::move(hf_shape), std::move(view), {0, 2, 1},
            std::move(fields));
        out.back().stack_index = e;
        out.back().stacked_shape = std::move(stacked);
      };
      for (int64_t e = 0; e < experts; ++e) {
        const std::string he = fmt::format("{}experts.{}.", hb, e);
        const std::string f_d = fmt::format("({}, hidden_size) = ({}, {})", ff_field, f, d);
        expert("expert_feedforward_gate_dense", he + (mixtral ? "w1" : "gate_proj") + ".weight",
               {f, d}, {experts, d, f}, f_d, e);
        expert("expert_feedforward_intermediate_dense",
               he + (mixtral ? "w3" : "up_proj") + ".weight", {f, d}, {experts, d, f}, f_d, e);
        expert("expert_feedforward_output_dense", he + (mixtral ? "w2" : "down_proj") + ".weight",
               {d, f}, {experts, f, d}, fmt::format("(hidden_size, {}) = ({}, {})", ff_field, d, f),
               e);
      }
      if (c.shared_expert_intermediate_size > 0) {  // Qwen 2 MoE's shared expert and its gate
        const int64_t fs = c.shared_expert_intermediate_size;
        const std::string ks = kb + "shared_expert_dense/", hs = hb + "shared_expert.";
        const std::string fs_d =
            fmt::format("(shared_expert_intermediate_size, hidden_size) = ({}, {})", fs, d);
        add(ks + "feedforward_gate_dense/kernel", hs + "gate_proj.weight", {fs, d}, {fs, d}, {1, 0},
            fs_d);
        add(ks + "feedforward_intermediate_dense/kernel", hs + "up_proj.weight", {fs, d}, {fs, d},
            {1, 0}, fs_d);
        add(ks + "feedforward_output_dense/kernel", hs + "down_proj.weight", {d, fs}, {d, fs},
            {1, 0},
            fmt::format("(hidden_size, shared_expert_intermediate_size) = ({}, {})", d, fs));
        add(kb + "shared_expert_gate_dense/kernel", hb + "shared_expert_gate.weight", {1, d},
            {1, d}, {1, 0}, fmt::format("(1, hidden_size) = (1, {})", d));
      }
      continue;
    }
    const std::string ff_d = fmt::format("(intermediate_size, hidden_size) = ({}, {})", ff, d);
    add(k + (gemma ? "ffw_gating" : "feedforward_gate_dense") + "/kernel",
        h + "mlp.gate_proj.weight", {ff, d}, {ff, d}, {1, 0}, ff_d);
    add(k + (gemma ? "ffw_gating_2" : "feedforward_intermediate_dense") + "/kernel",
        h + "mlp.up_proj.weight", {ff, d}, {ff, d}, {1, 0}, ff_d);
    add(k + (gemma ? "ffw_linear" : "feedforward_output_dense") + "/kernel",
        h + "mlp.down_proj.weight", {d, ff}, {d, ff}, {1, 0},
        fmt::format("(hidden_size, intermediate_size) = ({}, {})", d, ff));
  }
  add(std::string(gemma ? "final_normalization" : "sequence_output_layernorm") + "/scale",
      "model.norm.weight", {d}, {d}, {0}, d_fields);
  if (!c.tie_word_embeddings) {
    add("token_embedding/reverse_embeddings", "lm_head.weight", {vocab, d}, {vocab, d}, {1, 0},
        fmt::format("(vocab_size, hidden_size) = ({}, {})", vocab, d));
  }
  return out;
}

}  // namespace meshlayout
