#include "meshlayout/rules/hf_name_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const HfParamName& find(const HfNameMap& map, std::string_view hf_glob) {
  for (const HfParamName& p : map.params()) {
    if (p.hf_glob == hf_glob) return p;
  }
  throw std::runtime_error("no " + std::string(hf_glob));
}

TEST(HfNameMap, LlamaStyleFamiliesMapEveryWeightTheyMayHave) {
  const HfNameMap& llama = hf_name_map("llama");
  const HfNameMap& qwen2 = hf_name_map("qwen2");
  const HfNameMap& qwen3 = hf_name_map("qwen3");
  EXPECT_EQ(llama.family(), "llama");
  // Qwen 2: q/k/v biases, no o_proj bias; Qwen 3: head norms, no biases.
  EXPECT_EQ(qwen2.module_params("model.layers.*.self_attn.k_proj").size(), 2u);
  EXPECT_EQ(qwen2.module_params("model.layers.*.self_attn.o_proj").size(), 1u);
  EXPECT_EQ(qwen3.module_params("model.layers.*.self_attn.q_proj").size(), 1u);
  EXPECT_TRUE(llama.module_params("model.layers.*.self_attn.k_norm").empty());
  // One model's exact map: Llama without attention_bias has no biases.
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 2,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 8,
                .max_position_embeddings = 64};
  c.tie_word_embeddings = true;
  HfNameMap exact = hf_name_map_from_mappings("llama", hf_llama_weight_mappings(c));
  EXPECT_EQ(exact.module_params("model.layers.*.self_attn.q_proj").size(), 1u);
  EXPECT_TRUE(exact.module_params("lm_head").empty());
  EXPECT_EQ(exact.params().size(), 1u + 9u + 1u);  // embeddings, 9 per layer (once), norm
  const HfParamName& q = find(llama, "model.layers.*.self_attn.q_proj.weight");
  EXPECT_THAT(q.keras_globs, ElementsAre("transformer_layer_*/self_attention/query/kernel"));
  // (heads*head_dim, hidden) -> (hidden, heads, head_dim): HF 0 is keras 1 (heads major).
  EXPECT_THAT(q.keras_dim_of_hf_dim, ElementsAre(1, 0));
  EXPECT_THAT(q.hf_dim_of_keras_dim, ElementsAre(1, 0, -1));
  EXPECT_EQ(q.module_glob(), "model.layers.*.self_attn.q_proj");
  EXPECT_EQ(q.param_name(), "weight");
  const HfParamName& o = find(llama, "model.layers.*.self_attn.o_proj.weight");
  EXPECT_THAT(o.keras_globs,
              ElementsAre("transformer_layer_*/self_attention/attention_output/kernel"));
  EXPECT_THAT(o.keras_dim_of_hf_dim, ElementsAre(2, 0));
  EXPECT_THAT(o.hf_dim_of_keras_dim, ElementsAre(1, -1, 0));
  const HfParamName& down = find(llama, "model.layers.*.mlp.down_proj.weight");
  EXPECT_THAT(down.keras_dim_of_hf_dim, ElementsAre(1, 0));
  const HfParamName& qb = find(llama, "model.layers.*.self_attn.q_proj.bias");
  EXPECT_THAT(qb.keras_globs, ElementsAre("transformer_layer_*/self_attention/query/bias"));
  EXPECT_THAT(qb.hf_dim_of_keras_dim, ElementsAre(0, -1));
  const HfParamName& norm = find(qwen3, "model.layers.*.self_attn.k_norm.weight");
  EXPECT_THAT(norm.keras_globs,
              ElementsAre("transformer_layer_*/self_attention/key_dense_layernorm/scale"));
  const HfParamName& head = find(llama, "lm_head.weight");
  EXPECT_THAT(head.keras_globs, ElementsAre("token_embedding/reverse_embeddings"));
  EXPECT_THAT(head.keras_dim_of_hf_dim, ElementsAre(1, 0));
  EXPECT_EQ(llama.module_params("model.layers.*.self_attn.q_proj").size(), 2u);  // weight, bias
  EXPECT_TRUE(llama.module_params("model.layers.*.nothing").empty());
}

TEST(HfNameMap, GemmaKernelsAreHeadsFirst) {
  const HfNameMap& gemma = hf_name_map("gemma2");
  // (heads*head_dim, hidden) -> keras-hub's GemmaBackbone (heads, hidden, head_dim).
  const HfParamName& q = find(gemma, "model.layers.*.self_attn.q_proj.weight");
  EXPECT_THAT(q.keras_globs, ElementsAre("decoder_block_*/attention/query/kernel"));
  EXPECT_THAT(q.keras_dim_of_hf_dim, ElementsAre(0, 1));
  EXPECT_THAT(q.hf_dim_of_keras_dim, ElementsAre(0, 1, -1));
  EXPECT_THAT(find(gemma, "model.layers.*.mlp.up_proj.weight").keras_globs,
              ElementsAre("decoder_block_*/ffw_gating_2/kernel"));
  EXPECT_THAT(
      find(hf_name_map("gemma3_text"), "model.layers.*.self_attn.k_norm.weight").keras_globs,
      ElementsAre("decoder_block_*/attention/key_norm/scale"));
}

// Mixtures of experts: each expert's HF tensor is a slice of the stacked keras-hub kernel,
// whose first dimension is the HF name's expert index; the sparse blocks' automatic names
// give two keras globs.
TEST(HfNameMap, ExpertsAreSlicesOfTheStackedKernels) {
  const HfNameMap& mixtral = hf_name_map("mixtral");
  const HfParamName& w1 = find(mixtral, "model.layers.*.block_sparse_moe.experts.*.w1.weight");
  EXPECT_THAT(w1.keras_globs, ElementsAre("transformer_layer_*/mixtral_sparse_moe_block/experts/"
                                          "expert_feedforward_gate_dense",
                                          "transformer_layer_*/mixtral_sparse_moe_block_*/experts/"
                                          "expert_feedforward_gate_dense"));
  // (F, hidden) -> (experts, hidden, F).
  EXPECT_TRUE(w1.stacked());
  EXPECT_THAT(w1.keras_dim_of_hf_dim, ElementsAre(2, 1));
  EXPECT_THAT(w1.hf_dim_of_keras_dim, ElementsAre(kHfExpertIndex, 1, 0));
  EXPECT_EQ(w1.module_glob(), "model.layers.*.block_sparse_moe.experts.*.w1");
  // w2 (hidden, F) -> (experts, F, hidden); the router (experts, hidden) -> (hidden, experts).
  const HfParamName& w2 = find(mixtral, "model.layers.*.block_sparse_moe.experts.*.w2.weight");
  EXPECT_THAT(w2.keras_globs[0], ::testing::EndsWith("expert_feedforward_output_dense"));
  EXPECT_THAT(w2.keras_dim_of_hf_dim, ElementsAre(2, 1));
  const HfParamName& gate = find(mixtral, "model.layers.*.block_sparse_moe.gate.weight");
  EXPECT_FALSE(gate.stacked());
  EXPECT_THAT(gate.keras_globs[0], ::testing::EndsWith("sparse_feedforward_gate_dense/kernel"));
  EXPECT_THAT(gate.keras_dim_of_hf_dim, ElementsAre(1, 0));
  EXPECT_TRUE(mixtral.module_params("model.layers.*.mlp.gate_proj").empty());  // all sparse
  // Qwen: gate/up/down experts, dense layers (mlp_only_layers), Qwen 2's shared expert.
  const HfNameMap& qwen2 = hf_name_map("qwen2_moe");
  EXPECT_THAT(find(qwen2, "model.layers.*.mlp.experts.*.up_proj.weight").keras_globs[1],
              "transformer_layer_*/qwen_sparse_moe_block_*/experts/"
              "expert_feedforward_intermediate_dense");
  EXPECT_THAT(find(qwen2, "model.layers.*.mlp.gate_proj.weight").keras_globs,
              ElementsAre("transformer_layer_*/feedforward_gate_dense/kernel"));
  const HfParamName& shared = find(qwen2, "model.layers.*.mlp.shared_expert.down_proj.weight");
  EXPECT_FALSE(shared.stacked());
  EXPECT_THAT(shared.keras_globs[0],
              ::testing::EndsWith("qwen_sparse_moe_block/shared_expert_dense/"
                                  "feedforward_output_dense/kernel"));
  EXPECT_EQ(find(hf_name_map("qwen3_moe"), "model.layers.*.mlp.experts.*.down_proj.weight")
                .keras_globs.size(),
            2u);
  EXPECT_EQ(hf_name_glob("model.layers.3.mlp.experts.17.up_proj.weight"),
            "model.layers.*.mlp.experts.*.up_proj.weight");
}

TEST(HfNameMap, UnknownFamilyIsNamedAndOthersCanRegister) {
  try {
    hf_name_map("phi3");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'phi3'"));
    EXPECT_THAT(e.what(), HasSubstr("gemma, gemma2, gemma3_text, llama, mistral, mixtral, qwen2, "
                                    "qwen2_moe, qwen3, qwen3_moe"));
  }
  register_hf_name_map({"toy"}, HfNameMap("toy", {HfParamName{.hf_glob = "model.w.weight",
                                                              .keras_globs = {"w/kernel"},
                                                              .keras_dim_of_hf_dim = {1, 0},
                                                              .hf_dim_of_keras_dim = {1, 0}}}));
  EXPECT_EQ(hf_name_map("toy").params().size(), 1u);
  EXPECT_THAT(hf_name_map_families(), ::testing::Contains("toy"));
}

}  // namespace
}  // namespace meshlayout
