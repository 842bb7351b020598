// hf_llama_config_json_test.cc — LlamaConfig::to_json: every family's fields read back equal, and
// a hand-built config is validated before it is written.
#include <gtest/gtest.h>

#include <string>

#include "meshlayout/core/errors.h"
#include "meshlayout/models/hf_llama_config.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::HasSubstr;
using testing::ValueErrorMessage;

TEST(LlamaConfigTest, ToJsonReadsBackEqual) {
  LlamaConfig c{.vocab_size = 100,
                .hidden_size = 24,
                .intermediate_size = 60,
                .num_hidden_layers = 3,
                .num_attention_heads = 6,
                .num_key_value_heads = 2,
                .head_dim = 4,
                .rms_norm_eps = 1e-5,
                .rope_theta = 500000.0,
                .tie_word_embeddings = true,
                .max_position_embeddings = 512,
                .torch_dtype = "bfloat16"};
  const std::string json = c.to_json();
  EXPECT_TRUE(HasSubstr(json, "\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]"));
  EXPECT_EQ(LlamaConfig::from_json(json), c);
  // Every family's fields read back.
  for (const char* family : {"mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"}) {
    LlamaConfig f = c;
    f.family = family;
    f.sliding_window = f.family == "mistral" || f.family == "gemma2" ? 64 : 0;
    if (f.gemma()) f.query_pre_attn_scalar = 24;
    if (f.family == "gemma2") f.attn_logit_softcapping = 50, f.final_logit_softcapping = 30;
    if (f.family == "gemma3_text") {
      f.sliding_window = 64;
      f.sliding_window_pattern = 6;
      f.rope_local_base_freq = 10000;
      f.rope_linear_factor = 8;  // its rope_scaling is the linear one, not llama3's
    }
    f.attention_bias = f.family == "qwen3";
    if (f.family != "gemma3_text") {
      f.rope_scaling = Llama3RopeScaling{.factor = 4.0, .original_max_position_embeddings = 128};
    }
    EXPECT_EQ(LlamaConfig::from_json(f.to_json()), f) << family;
    EXPECT_TRUE(HasSubstr(f.to_json(), f.architecture())) << family;
  }
  c.head_dim = 0;  // a hand-built config is validated before it is written
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([&] { (void)c.to_json(); }), "'head_dim' is 0"));
}

}  // namespace
}  // namespace meshlayout
