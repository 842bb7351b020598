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
  EXPECT_EQ(q.keras_glob, "transformer_layer_*/self_attention/query/kernel");
  // (heads*head_dim, hidden) -> (hidden, heads, head_dim): HF 0 is keras 1 (heads major).
  EXPECT_THAT(q.keras_dim_of_hf_dim, ElementsAre(1, 0));
  EXPECT_THAT(q.hf_dim_of_keras_dim, ElementsAre(1, 0, -1));
  EXPECT_EQ(q.module_glob(), "model.layers.*.self_attn.q_proj");
  EXPECT_EQ(q.param_name(), "weight");
  const HfParamName& o = find(llama, "model.layers.*.self_attn.o_proj.weight");
  EXPECT_EQ(o.keras_glob, "transformer_layer_*/self_attention/attention_output/kernel");
  EXPECT_THAT(o.keras_dim_of_hf_dim, ElementsAre(2, 0));
  EXPECT_THAT(o.hf_dim_of_keras_dim, ElementsAre(1, -1, 0));
  const HfParamName& down = find(llama, "model.layers.*.mlp.down_proj.weight");
  EXPECT_THAT(down.keras_dim_of_hf_dim, ElementsAre(1, 0));
  const HfParamName& qb = find(llama, "model.layers.*.self_attn.q_proj.bias");
  EXPECT_EQ(qb.keras_glob, "transformer_layer_*/self_attention/query/bias");
  EXPECT_THAT(qb.hf_dim_of_keras_dim, ElementsAre(0, -1));
  const HfParamName& norm = find(qwen3, "model.layers.*.self_attn.k_norm.weight");
  EXPECT_EQ(norm.keras_glob, "transformer_layer_*/self_attention/key_dense_layernorm/scale");
  const HfParamName& head = find(llama, "lm_head.weight");
  EXPECT_EQ(head.keras_glob, "token_embedding/reverse_embeddings");
  EXPECT_THAT(head.keras_dim_of_hf_dim, ElementsAre(1, 0));
  EXPECT_EQ(llama.module_params("model.layers.*.self_attn.q_proj").size(), 2u);  // weight, bias
  EXPECT_TRUE(llama.module_params("model.layers.*.nothing").empty());
}

TEST(HfNameMap, GemmaKernelsAreHeadsFirst) {
  const HfNameMap& gemma = hf_name_map("gemma2");
  // (heads*head_dim, hidden) -> keras-hub's GemmaBackbone (heads, hidden, head_dim).
  const HfParamName& q = find(gemma, "model.layers.*.self_attn.q_proj.weight");
  EXPECT_EQ(q.keras_glob, "decoder_block_*/attention/query/kernel");
  EXPECT_THAT(q.keras_dim_of_hf_dim, ElementsAre(0, 1));
  EXPECT_THAT(q.hf_dim_of_keras_dim, ElementsAre(0, 1, -1));
  EXPECT_EQ(find(gemma, "model.layers.*.mlp.up_proj.weight").keras_glob,
            "decoder_block_*/ffw_gating_2/kernel");
  EXPECT_EQ(find(hf_name_map("gemma3_text"), "model.layers.*.self_attn.k_norm.weight").keras_glob,
            "decoder_block_*/attention/key_norm/scale");
}

TEST(HfNameMap, UnknownFamilyIsNamedAndOthersCanRegister) {
  try {
    hf_name_map("mixtral");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'mixtral'"));
    EXPECT_THAT(e.what(), HasSubstr("gemma, gemma2, gemma3_text, llama, mistral, qwen2, qwen3"));
  }
  register_hf_name_map({"toy"}, HfNameMap("toy", {HfParamName{.hf_glob = "model.w.weight",
                                                              .keras_glob = "w/kernel",
                                                              .keras_dim_of_hf_dim = {1, 0},
                                                              .hf_dim_of_keras_dim = {1, 0}}}));
  EXPECT_EQ(hf_name_map("toy").params().size(), 1u);
  EXPECT_THAT(hf_name_map_families(), ::testing::Contains("toy"));
}

}  // namespace
}  // namespace meshlayout
