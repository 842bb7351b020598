#include "meshlayout/rules/model_tensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const ModelTensor& find(const std::vector<ModelTensor>& ts, const std::string& path) {
  for (const ModelTensor& t : ts) {
    if (t.path == path) return t;
  }
  throw ValueError("no tensor " + path);
}

TEST(ModelTensors, DimensionsAreConfigFieldsAndHfDimensions) {
  const LlamaConfig llama = testing::family_base("llama");
  const std::vector<ModelTensor> ts = model_tensors(llama);
  const ModelTensor& q = find(ts, "transformer_layer_1/self_attention/query/kernel");
  EXPECT_EQ(q.shape, (Shape{32, 4, 8}));
  EXPECT_EQ(q.bytes, 32 * 4 * 8 * 4);
  EXPECT_THAT(q.dims, ElementsAre("hidden_size", "num_attention_heads", "head_dim"));
  EXPECT_THAT(q.hf_dims, ElementsAre(1, 0, -1));  // q_proj.weight (heads*head_dim, hidden)
  EXPECT_EQ(q.hf_name, "model.layers.1.self_attn.q_proj.weight");
  const ModelTensor& o = find(ts, "transformer_layer_0/self_attention/attention_output/kernel");
  EXPECT_THAT(o.dims, ElementsAre("num_attention_heads", "head_dim", "hidden_size"));
  EXPECT_THAT(o.hf_dims, ElementsAre(1, -1, 0));
  EXPECT_THAT(find(ts, "transformer_layer_0/self_attention/key/kernel").dims,
              ElementsAre("hidden_size", "num_key_value_heads", "head_dim"));
  EXPECT_THAT(find(ts, "token_embedding/reverse_embeddings").dims,
              ElementsAre("hidden_size", "vocab_size"));
  EXPECT_THAT(find(ts, "transformer_layer_0/feedforward_output_dense/kernel").dims,
              ElementsAre("intermediate_size", "hidden_size"));
  // Gemma: heads first.
  const LlamaConfig gemma = testing::families()[6].config;
  ASSERT_EQ(gemma.family, "gemma");
  const std::vector<ModelTensor> gts = model_tensors(gemma);
  const ModelTensor& gq = find(gts, "decoder_block_0/attention/query/kernel");
  EXPECT_THAT(gq.dims, ElementsAre("num_attention_heads", "hidden_size", "head_dim"));
  EXPECT_THAT(gq.hf_dims, ElementsAre(0, 1, -1));
}

TEST(ModelTensors, LayerGlob) {
  EXPECT_EQ(layer_glob("transformer_layer_12/self_attention/query/kernel"),
            "transformer_layer_*/self_attention/query/kernel");
  EXPECT_EQ(layer_glob("decoder_block_3/ffw_gating_2/kernel"),
            "decoder_block_*/ffw_gating_2/kernel");
  EXPECT_EQ(layer_glob("model.layers.7.mlp.up_proj.weight"), "model.layers.*.mlp.up_proj.weight");
  EXPECT_EQ(layer_glob("token_embedding/embeddings"), "token_embedding/embeddings");
}

class ModelTensorsDir : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    dir_ = ::testing::TempDir() + "model_tensors_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    reset_device_count();
  }
  std::string dir_;
};

TEST_F(ModelTensorsDir, ConfigFamilyOverrideAndWeightsOnly) {
  LlamaConfig c = testing::family_base("llama");
  write_random_hf_llama(dir_, c);
  const ModelTensors m = load_model_tensors(dir_);
  EXPECT_EQ(m.config->family, "llama");
  EXPECT_EQ(m.tensors.size(), model_tensors(c).size());
  // --family: the same config under another family's names.
  const ModelTensors g = load_model_tensors(dir_, "qwen2");
  EXPECT_EQ(g.config->family, "qwen2");
  EXPECT_EQ(g.tensors[3].path, "transformer_layer_0/self_attention/query/bias");
  EXPECT_THAT(rules_test::error_of([&] { load_model_tensors(dir_, "bert"); }),
              HasSubstr("unknown model family 'bert'; expected one of llama, mistral"));
  // Without config.json: the file's tensors by name, dimensions unknown.
  std::filesystem::remove(dir_ + "/config.json");
  const ModelTensors w = load_model_tensors(dir_);
  EXPECT_FALSE(w.config);
  const ModelTensor& q = find(w.tensors, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.shape, (Shape{32, 32}));
  EXPECT_EQ(q.bytes, 32 * 32 * 4);
  EXPECT_THAT(q.dims, ElementsAre("", ""));
  EXPECT_THAT(rules_test::error_of([&] { load_model_tensors(dir_, "llama"); }),
              HasSubstr("has none (a weights-only model"));
}

}  // namespace
}  // namespace meshlayout
