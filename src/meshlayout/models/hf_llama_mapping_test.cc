// hf_llama_mapping_test.cc — hf_llama_weight_mappings for every family: each keras-hub variable
// backed exactly once (a stacked expert kernel once per expert slice), each HF name once, and
// every view a reshape of its HF tensor permuted into the variable's shape.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/random_moe_hf.h"

namespace meshlayout {
namespace {

LlamaConfig family_config(const std::string& family) {
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 16,
                .intermediate_size = 40,
                .num_hidden_layers = 2,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 4};
  c.family = family;
  if (c.gemma()) c.query_pre_attn_scalar = 4;
  if (family == "gemma2" || family == "gemma3_text" || family == "mistral") c.sliding_window = 8;
  if (family == "gemma3_text") c.sliding_window_pattern = 2, c.rope_local_base_freq = 10000;
  return c;
}

TEST(HfLlamaMapping, EveryVariableBackedOnceAndEveryViewConsistent) {
  std::vector<std::pair<std::string, LlamaConfig>> configs;
  for (const char* f : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"}) {
    configs.emplace_back(f, family_config(f));
  }
  for (const char* f : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    configs.emplace_back(f, LlamaConfig::from_json(small_hf_moe_spec(f).to_json()));
  }
  LlamaConfig untied = family_config("llama");
  untied.tie_word_embeddings = false;
  configs.emplace_back("llama untied", untied);
  for (const auto& [name, config] : configs) {
    SCOPED_TRACE(name);
    const std::vector<HfWeightMapping> mappings = hf_llama_weight_mappings(config);
    ASSERT_FALSE(mappings.empty());
    std::set<std::string> hf_names;
    std::map<std::string, std::set<int64_t>> slices;  // keras path → stack indices
    for (const HfWeightMapping& m : mappings) {
      SCOPED_TRACE(m.hf_name);
      EXPECT_TRUE(hf_names.insert(m.hf_name).second) << "an HF name twice";
      EXPECT_EQ(num_elements(m.hf_shape), num_elements(m.view_shape));
      ASSERT_EQ(m.perm.size(), m.view_shape.size());
      for (size_t i = 0; i < m.perm.size(); ++i) {
        EXPECT_EQ(m.keras_shape[i], m.view_shape[static_cast<size_t>(m.perm[i])]);
      }
      EXPECT_FALSE(m.hf_shape_fields.empty());
      EXPECT_TRUE(slices[m.keras_path].insert(m.stack_index).second) << "a slice twice";
      if (m.stack_index >= 0) {
        ASSERT_FALSE(m.stacked_shape.empty());
        EXPECT_EQ(m.keras_shape[0], 1);
        EXPECT_EQ(Shape(m.keras_shape.begin() + 1, m.keras_shape.end()),
                  Shape(m.stacked_shape.begin() + 1, m.stacked_shape.end()));
        EXPECT_LT(m.stack_index, m.stacked_shape[0]);
      }
    }
    int64_t stacked = 0;
    for (const auto& [path, indices] : slices) {
      SCOPED_TRACE(path);
      if (*indices.begin() < 0) {
        EXPECT_EQ(indices.size(), 1u) << "a whole variable and slices";
      } else {
        ++stacked;
        EXPECT_EQ(static_cast<int64_t>(indices.size()), config.num_experts) << "slices missing";
      }
    }
    EXPECT_EQ(stacked > 0, config.num_experts > 0);
    EXPECT_EQ(hf_names.count("lm_head.weight"), config.tie_word_embeddings ? 0u : 1u);
  }
}

}  // namespace
}  // namespace meshlayout
