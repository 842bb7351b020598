#include "meshlayout/cli/demo_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "meshlayout/layout/devices.h"

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::vector<std::string> kFamilies = {"llama",     "mistral",  "qwen2",       "qwen3",
                                            "gemma",     "gemma2",   "gemma3_text", "mixtral",
                                            "qwen3_moe", "qwen2_moe"};

// Every family's config is valid, of its family, and what the story says of it is true.
TEST(DemoModelTest, EveryFamilyHasAValidConfigAndItsStory) {
  for (const std::string& family : kFamilies) {
    SCOPED_TRACE(family);
    const LlamaConfig c = demo_llama_config(family);
    EXPECT_EQ(c.family, family);
    EXPECT_EQ(c.num_hidden_layers, 2);
    // The 2x4 mesh's "model" axis divides what keras-hub's rules split.
    EXPECT_EQ(c.hidden_size % 4, 0);
    EXPECT_EQ(c.num_attention_heads % 4, 0);
    EXPECT_THAT(demo_family_story(c), HasSubstr("(" + c.architecture() + ")"));
  }
  EXPECT_EQ(demo_llama_config("mistral").sliding_window, 4);
  EXPECT_EQ(demo_family_story(demo_llama_config("mistral")),
            "Mistral (MistralForCausalLM), sliding window of 4 keys");
  EXPECT_EQ(demo_llama_config("qwen3").head_dim, 24);
  EXPECT_THAT(demo_family_story(demo_llama_config("qwen3")), HasSubstr("head_dim 24 != 128 / 8"));
  EXPECT_TRUE(demo_llama_config("llama").tie_word_embeddings);
  EXPECT_FALSE(demo_llama_config("gemma2").tie_word_embeddings);
  EXPECT_EQ(demo_llama_config("mixtral").num_experts, 4);
  EXPECT_THAT(demo_family_story(demo_llama_config("qwen2_moe")),
              HasSubstr("8 experts of 64 and a gated shared expert of 128"));
  EXPECT_THAT(demo_family_story(demo_llama_config("llama")),
              StartsWith("Llama (LlamaForCausalLM)"));
}

TEST(DemoModelTest, NamesEachFamilysKerasHubBackbone) {
  const std::vector<std::pair<std::string, std::string>> want = {
      {"llama", "Llama"},       {"mistral", "Mistral"}, {"qwen2", "Qwen"},
      {"qwen3", "Qwen"},        {"gemma", "Gemma"},     {"gemma2", "Gemma"},
      {"gemma3_text", "Gemma"}, {"mixtral", "Mixtral"}, {"qwen3_moe", "Qwen3Moe"},
      {"qwen2_moe", "QwenMoe"}};
  for (const auto& [family, backbone] : want) {
    EXPECT_EQ(demo_backbone_name(demo_llama_config(family)), backbone) << family;
  }
}

// The Megatron rules build every family's model on the 2x4 mesh; each rule matches a variable
// (but the reverse embeddings' of a model with tied embeddings, and the dense feed-forward's
// of Mixtral, whose every layer is sparse), and the embeddings are split on the vocabulary
// over "model".
TEST(DemoModelTest, MegatronRulesShardEveryFamilysModel) {
  set_device_count(8);
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  for (const std::string& family : kFamilies) {
    SCOPED_TRACE(family);
    const LlamaConfig c = demo_llama_config(family);
    const LayoutMap rules = demo_megatron_rules(mesh, c);
    const LlamaModel model(c, rules);
    std::vector<std::string> paths;
    bool some_split = false;
    for (const VariablePtr& v : model.variables()) {
      paths.push_back(v->path());
      some_split = some_split || v->layout() != TensorLayout::replicated(
                                                    static_cast<int>(v->shape().size()), mesh);
    }
    EXPECT_TRUE(some_split);
    for (const size_t i : rules.unused_rules(paths)) {
      const std::string& pattern = rules.rule(i).pattern;
      EXPECT_TRUE(
          (c.tie_word_embeddings && pattern.find("reverse_embeddings") != std::string::npos) ||
          (c.family == "mixtral" && pattern.starts_with("transformer_layer_[0-9]+/feedforward_")))
          << pattern;
    }
    EXPECT_EQ(rules.get("token_embedding/embeddings")->to_string(),
              "layout[model,None]@mesh[batch=2,model=4]");
  }
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout::cli
