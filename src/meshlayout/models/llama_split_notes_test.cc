// llama_split_notes: every split a Llama-style model cannot honour exactly is named with what
// meshlayout does instead, once for all layers that share it; rules whose splits all divide say
// nothing.
#include "meshlayout/models/llama_split_notes.h"

#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_test_util.h"

namespace meshlayout {
namespace {

class LlamaSplitNotesTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

LlamaConfig config(int64_t heads, int64_t kv_heads, int64_t vocab, int64_t ff) {
  LlamaConfig c{.vocab_size = vocab,
                .hidden_size = 32,
                .intermediate_size = ff,
                .num_hidden_layers = 3,
                .num_attention_heads = heads,
                .num_key_value_heads = kv_heads,
                .head_dim = 8,
                .tie_word_embeddings = false};
  return c;
}

bool has(const std::vector<std::string>& notes, const std::string& part) {
  for (const std::string& n : notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

std::string all(const std::vector<std::string>& notes) {
  std::string out;
  for (const std::string& n : notes) out += n + "\n";
  return out;
}

TEST_F(LlamaSplitNotesTest, SplitsThatDivideSayNothing) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  EXPECT_TRUE(llama_split_notes(config(8, 4, 64, 48), testing::megatron_rules(mesh)).empty());
  EXPECT_TRUE(llama_split_notes(config(8, 4, 64, 48), LayoutMap(mesh)).empty());
}

TEST_F(LlamaSplitNotesTest, KeyValueHeadsThatDoNotSplitLikeTheQueryHeads) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  // keras-hub #1613 / transformers #48307: 2 KV heads on a 4-way axis.
  const std::vector<std::string> notes =
      llama_split_notes(config(8, 2, 64, 48), testing::megatron_rules(mesh));
  EXPECT_TRUE(has(notes,
                  "the 2 key/value heads do not split like the 8 query heads over 'model' (4) "
                  "(by 'transformer_layer_0/self_attention/query/kernel'): each device keeps "
                  "all 2 key/value heads"))
      << all(notes);
  EXPECT_TRUE(has(notes, "the key/value heads (2) split over 'model' (4)")) << all(notes);
  EXPECT_TRUE(has(notes, "(and the same in 2 more layers)")) << all(notes);
  EXPECT_EQ(notes.size(), 2u) << all(notes);  // once per kind, not per layer
}

TEST_F(LlamaSplitNotesTest, UnevenHeadsVocabularyWidthAndSplitHeadDim) {
  set_device_count(6);
  const DeviceMesh mesh({2, 3}, {"batch", "model"});  // a 3-way model axis
  LayoutMap rules = testing::megatron_rules(mesh);
  rules["transformer_layer_1/self_attention/value/kernel"] = TensorLayout({None, None, "model"});
  const std::vector<std::string> notes = llama_split_notes(config(4, 4, 37, 40), rules);
  EXPECT_TRUE(has(notes, "the query heads (4) split over 'model' (3)")) << all(notes);
  EXPECT_TRUE(has(notes,
                  "the vocabulary (37) split over 'model' (3) by "
                  "'token_embedding/embeddings': 37 does not divide by 3"))
      << all(notes);
  EXPECT_TRUE(has(notes, "token_embedding/reverse_embeddings")) << all(notes);
  EXPECT_TRUE(has(notes, "the feed-forward width (40) split over 'model' (3)")) << all(notes);
  EXPECT_TRUE(has(notes,
                  "head_dim (8) split over 'model' (3) by "
                  "'transformer_layer_1/self_attention/value/kernel': it is gathered"))
      << all(notes);
  // keras-hub's 2-D rules put the heads on 'batch' (2) — the 4 heads divide: no head note.
  const std::vector<std::string> keras_hub =
      llama_split_notes(config(4, 4, 36, 48), llama_layout_map(mesh, "model", "batch"));
  EXPECT_FALSE(has(keras_hub, "query heads")) << all(keras_hub);
}

// Gemma's names and heads-first kernels: keras-hub's GemmaBackbone rules put the heads on
// 'model' — 2 key/value heads cannot follow 8 query heads over 4 devices.
TEST_F(LlamaSplitNotesTest, GemmaNamesAndHeadsFirstKernels) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  LlamaConfig c = config(8, 2, 64, 48);
  c.family = "gemma2";
  c.query_pre_attn_scalar = 8;
  const std::vector<std::string> notes = llama_split_notes(c, gemma_layout_map(mesh));
  EXPECT_TRUE(has(notes,
                  "the 2 key/value heads do not split like the 8 query heads over 'model' (4) "
                  "(by 'decoder_block_0/attention/query/kernel')"))
      << all(notes);
  EXPECT_TRUE(has(notes, "(and the same in 2 more layers)")) << all(notes);
  c.num_key_value_heads = 4;
  EXPECT_TRUE(llama_split_notes(c, gemma_layout_map(mesh)).empty())
      << all(llama_split_notes(c, gemma_layout_map(mesh)));
}

}  // namespace
}  // namespace meshlayout

namespace meshlayout {
namespace {

// A mixture of experts: 6 experts over a 4-way axis are uneven blocks, once for every sparse
// layer; experts over the batch axis say how the tokens travel; 4 experts over 4 say nothing.
TEST(LlamaSplitNotesMoeTest, UnevenExpertsAndExpertsOverTheBatchAxisAreSaid) {
  set_device_count(8);
  LlamaConfig c = config(4, 2, 64, 48);
  c.family = "mixtral";
  c.num_experts = 6;
  c.num_experts_per_tok = 2;
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  LayoutMap rules(mesh);
  rules["experts/expert_feedforward_.*"] = TensorLayout({"model", None, None});
  std::vector<std::string> notes = llama_split_notes(c, rules);
  EXPECT_TRUE(has(notes, "the experts (6) split over 'model' (4)")) << all(notes);
  EXPECT_TRUE(has(notes, "(and the same in 2 more layers)")) << all(notes);
  c.num_experts = 4;
  EXPECT_TRUE(llama_split_notes(c, rules).empty()) << all(llama_split_notes(c, rules));
  LayoutMap over_batch(mesh);
  over_batch["experts/expert_feedforward_.*"] = TensorLayout({"batch", None, None});
  notes = llama_split_notes(c, over_batch);
  EXPECT_TRUE(has(notes, "the experts split over the batch axis 'batch'")) << all(notes);
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout
