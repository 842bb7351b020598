// The Llama against a float64 reference fed its own weights: logits within 1e-4 relative and
// identical greedy tokens, for MHA and GQA, tied and untied embeddings, replicated, keras-hub
// 2-D rules, Megatron rules and key/value heads that do not divide the model axis; keras-hub
// paths and shapes (generation's own tests: generation_test.cc).
#include "meshlayout/models/llama.h"

#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::Vec;

class LlamaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
};

LlamaConfig tiny(int64_t heads, int64_t kv_heads, bool tied, int64_t head_dim = 4) {
  LlamaConfig c{.vocab_size = 48,
                .hidden_size = heads * head_dim,
                .intermediate_size = 40,
                .num_hidden_layers = 2,
                .num_attention_heads = heads,
                .num_key_value_heads = kv_heads,
                .head_dim = head_dim,
                .rms_norm_eps = 1e-5,
                .rope_theta = 10000.0,
                .tie_word_embeddings = tied,
                .max_position_embeddings = 64};
  return c;
}

double max_relative_error(const HostTensor& got, const Vec& want) {
  const float* g = got.data_as<float>();
  double worst = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(g[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}

TEST_F(LlamaTest, LogitsAndGreedyTokensMatchFloat64OnEveryLayout) {
  struct Case {
    LlamaConfig config;
    std::string what;
  };
  const Case configs[] = {{tiny(4, 4, false), "MHA untied"},
                          {tiny(8, 2, true), "GQA tied, 2 KV heads on 4"},
                          {tiny(8, 4, false), "GQA untied"},
                          {tiny(6, 3, true), "uneven heads (6, 3 on 4)"}};
  const std::vector<int32_t> tokens = {3, 17, 42, 5, 9, 1, 0, 47, 30, 8};  // (2, 5)
  for (const Case& c : configs) {
    std::vector<int32_t> first_tokens;
    for (const std::string rules_name : {"replicated", "keras-hub 2-D", "Megatron"}) {
      clear_session();
      const LayoutMap rules = rules_name == "replicated" ? LayoutMap(mesh_)
                              : rules_name == "Megatron"
                                  ? testing::megatron_rules(mesh_)
                                  : llama_layout_map(mesh_, "model", "batch");
      LlamaModel model(c.config, rules);
      HostTensor t(DType::kI32, {2, 5});
      std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
      const Array logits = model.logits(distribute_tensor(t, TensorLayout({"batch", None}, mesh_)));
      const Vec want = testing::reference_llama_logits(model, tokens, 2, 5);
      EXPECT_LT(max_relative_error(logits.gather(), want), 1e-4)
          << c.what << " under " << rules_name;
      const GenerateResult r = generate(model, {{3, 17, 42}}, {.max_new_tokens = 5});
      if (first_tokens.empty()) {
        first_tokens = r.tokens[0];
        EXPECT_EQ(first_tokens, testing::reference_greedy(model, {3, 17, 42}, 5)) << c.what;
      }
      EXPECT_EQ(r.tokens[0], first_tokens) << c.what << " under " << rules_name;
    }
  }
}

TEST_F(LlamaTest, KerasHubPathsShapesAndLayouts) {
  LlamaModel model(tiny(8, 4, false), llama_layout_map(mesh_, "model", "batch"));
  std::map<std::string, Shape> shapes;
  std::map<std::string, TensorLayout> layouts;
  for (const VariablePtr& v : model.variables()) {
    shapes.emplace(v->path(), v->shape());
    layouts.emplace(v->path(), v->value().layout());
  }
  EXPECT_EQ(shapes.size(), 3u + 2 * 9u);
  EXPECT_EQ(shapes.at("token_embedding/embeddings"), (Shape{48, 32}));
  EXPECT_EQ(shapes.at("token_embedding/reverse_embeddings"), (Shape{32, 48}));
  EXPECT_EQ(shapes.at("transformer_layer_1/self_attention/query/kernel"), (Shape{32, 8, 4}));
  EXPECT_EQ(shapes.at("transformer_layer_1/self_attention/key/kernel"), (Shape{32, 4, 4}));
  EXPECT_EQ(shapes.at("transformer_layer_1/self_attention/attention_output/kernel"),
            (Shape{8, 4, 32}));
  EXPECT_EQ(shapes.at("transformer_layer_0/feedforward_gate_dense/kernel"), (Shape{32, 40}));
  EXPECT_EQ(shapes.at("transformer_layer_0/feedforward_output_dense/kernel"), (Shape{40, 32}));
  EXPECT_EQ(shapes.at("transformer_layer_0/self_attention_layernorm/scale"), (Shape{32}));
  EXPECT_EQ(shapes.at("transformer_layer_0/feedforward_layernorm/scale"), (Shape{32}));
  EXPECT_EQ(shapes.at("sequence_output_layernorm/scale"), (Shape{32}));
  EXPECT_EQ(layouts.at("token_embedding/embeddings"), TensorLayout({"model", "batch"}, mesh_));
  EXPECT_EQ(layouts.at("transformer_layer_0/self_attention/value/kernel"),
            TensorLayout({"model", "batch", None}, mesh_));
  EXPECT_EQ(layouts.at("transformer_layer_0/self_attention/attention_output/kernel"),
            TensorLayout({"model", None, "batch"}, mesh_));
  EXPECT_EQ(layouts.at("transformer_layer_0/feedforward_output_dense/kernel"),
            TensorLayout({"model", "batch"}, mesh_));
  EXPECT_EQ(layouts.at("sequence_output_layernorm/scale"), TensorLayout({None}, mesh_));
  EXPECT_THROW((void)llama_layout_map(mesh_, "model", "data"), ValueError);
}

}  // namespace
}  // namespace meshlayout
