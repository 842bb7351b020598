// hf_llama_config_test.cc — LlamaConfig: defaults, rope_theta's two places, every refusal
// (its message names the field and the value); to_json() in hf_llama_config_json_test.cc.
#include "meshlayout/models/hf_llama_config.h"

#include <gtest/gtest.h>

#include <string>

#include "meshlayout/core/errors.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::HasSubstr;
using testing::ValueErrorMessage;

// A minimal config with `extra` fields appended (text after the required ones).
std::string config_text(const std::string& extra = "") {
  return R"({"vocab_size": 64, "hidden_size": 16, "intermediate_size": 40,
             "num_hidden_layers": 2, "num_attention_heads": 4)" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}

std::string refusal(const std::string& extra) {
  return ValueErrorMessage([&] { LlamaConfig::from_json(config_text(extra)); });
}

TEST(LlamaConfigTest, DefaultsFollowTransformers) {
  const LlamaConfig c = LlamaConfig::from_json(config_text());
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.hidden_size, 16);
  EXPECT_EQ(c.intermediate_size, 40);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(LlamaConfigTest, ReadsARealLlama3StyleConfig) {
  const LlamaConfig c = LlamaConfig::from_json(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
    "vocab_size": 128256, "head_dim": 64})");
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(LlamaConfigTest, RopeThetaFromRopeParameters) {
  const LlamaConfig c = LlamaConfig::from_json(
      config_text(R"("rope_parameters": {"rope_type": "default", "rope_theta": 250000.0})"));
  EXPECT_EQ(c.rope_theta, 250000.0);
  // A "default" rope_scaling is no scaling.
  EXPECT_EQ(
      LlamaConfig::from_json(config_text(R"("rope_scaling": {"type": "default"})")).rope_theta,
      10000.0);
}

TEST(LlamaConfigTest, RefusesOtherArchitecturesAndModelTypes) {
  std::string m = refusal(R"("architectures": ["Gemma3ForCausalLM"])");
  EXPECT_TRUE(HasSubstr(m, "unsupported architecture [\"Gemma3ForCausalLM\"]"));
  EXPECT_TRUE(HasSubstr(m, "expected LlamaForCausalLM"));
  m = refusal(R"("model_type": "phi3")");
  EXPECT_TRUE(HasSubstr(m, "model_type 'phi3'"));
  EXPECT_TRUE(HasSubstr(m, "Qwen3ForCausalLM (model_type 'qwen3')"));
  EXPECT_TRUE(HasSubstr(m, "MixtralForCausalLM (model_type 'mixtral')"));
  // architectures and model_type must agree.
  m = refusal(R"("architectures": ["MistralForCausalLM"], "model_type": "qwen2")");
  EXPECT_TRUE(HasSubstr(m, "for model_type 'qwen2', expected Qwen2ForCausalLM"));
}

// The families: what each reads from its config.json (transformers' defaults where absent).
TEST(LlamaConfigTest, ReadsEveryFamily) {
  LlamaConfig c = LlamaConfig::from_json(
      config_text(R"("architectures": ["MistralForCausalLM"], "model_type": "mistral",
                     "sliding_window": 6)"));
  EXPECT_EQ(c.family, "mistral");
  EXPECT_EQ(c.sliding_window, 6);
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(LlamaConfig::from_json(config_text(R"("model_type": "mistral")")).sliding_window, 4096);
  EXPECT_EQ(
      LlamaConfig::from_json(config_text(R"("model_type": "mistral", "sliding_window": null)"))
          .sliding_window,
      0);
  c = LlamaConfig::from_json(config_text(R"("architectures": ["Qwen2ForCausalLM"],
                     "model_type": "qwen2", "use_sliding_window": false,
                     "sliding_window": 32768, "tie_word_embeddings": true)"));
  EXPECT_EQ(c.family, "qwen2");
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_FALSE(c.output_bias());
  EXPECT_FALSE(c.qk_norm());
  EXPECT_EQ(c.sliding_window, 0);  // Qwen's window is off unless use_sliding_window
  c = LlamaConfig::from_json(
      config_text(R"("architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3")"));
  EXPECT_EQ(c.head_dim, 128);  // Qwen3Config's default, independent of hidden_size / heads
  EXPECT_TRUE(c.qk_norm());
  EXPECT_FALSE(c.qkv_bias());
  c = LlamaConfig::from_json(config_text(R"("model_type": "qwen3", "attention_bias": true)"));
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_TRUE(c.output_bias());
  c = LlamaConfig::from_json(config_text(R"("attention_bias": true)"));  // Llama's own biases
  EXPECT_TRUE(c.qkv_bias() && c.output_bias());
  // Gemma 2 with transformers' defaults, and Gemma 1.
  c = LlamaConfig::from_json(config_text(R"("architectures": ["Gemma2ForCausalLM"],
                     "model_type": "gemma2", "hidden_activation": "gelu_pytorch_tanh")"));
  EXPECT_TRUE(c.gemma() && c.post_norms());
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.window_of_layer(0), 4096);
  EXPECT_EQ(c.window_of_layer(1), 0);
  EXPECT_EQ(c.attn_logit_softcapping, 50.0);
  EXPECT_EQ(c.final_logit_softcapping, 30.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1.0 / 16.0);
  c = LlamaConfig::from_json(config_text(
      R"("model_type": "gemma2", "final_logit_softcapping": null, "head_dim": 8,
         "layer_types": ["sliding_attention", "full_attention"])"));
  EXPECT_EQ(c.final_logit_softcapping, 0.0);
  c = LlamaConfig::from_json(config_text(R"("model_type": "gemma", "hidden_act": "gelu")"));
  EXPECT_TRUE(c.gemma());
  EXPECT_FALSE(c.post_norms());
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);  // head_dim
  EXPECT_EQ(c.window_of_layer(0), 0);
  // Gemma 3 (text): q/k norms, local and global ropes, one global layer in six.
  c = LlamaConfig::from_json(config_text(R"("architectures": ["Gemma3ForCausalLM"],
      "model_type": "gemma3_text", "rope_scaling": {"rope_type": "linear", "factor": 8.0})"));
  EXPECT_TRUE(c.gemma() && c.post_norms() && c.qk_norm());
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_local_base_freq, 10000.0);
  EXPECT_EQ(c.rope_linear_factor, 8.0);
  EXPECT_EQ(c.sliding_window_pattern, 6);
  EXPECT_EQ(c.window_of_layer(4), 4096);
  EXPECT_EQ(c.window_of_layer(5), 0);
  EXPECT_EQ(c.rope_of_layer(0).theta, 10000.0);
  EXPECT_EQ(c.rope_of_layer(5).theta, 1e6);
  EXPECT_EQ(c.rope_of_layer(5).linear_factor, 8.0);
  EXPECT_EQ(c.final_logit_softcapping, 0.0);
  // Llama 3.1's rope_scaling, in both of its places.
  c = LlamaConfig::from_json(config_text(
      R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(*c.rope_scaling, (Llama3RopeScaling{8.0, 1.0, 4.0, 8192}));
  c = LlamaConfig::from_json(config_text(
      R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192})"));
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling->factor, 32.0);
}

TEST(LlamaConfigTest, RefusesMissingAndNonPositiveSizes) {
  std::string m = ValueErrorMessage([] {
    LlamaConfig::from_json(R"({"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2,
                               "num_attention_heads": 4})");
  });
  EXPECT_TRUE(HasSubstr(m, "no 'intermediate_size'"));
  EXPECT_TRUE(HasSubstr(m, "required"));
  m = refusal(R"("num_key_value_heads": 0)");
  EXPECT_TRUE(HasSubstr(m, "'num_key_value_heads' is 0, expected a positive integer"));
  m = ValueErrorMessage([] {
    LlamaConfig::from_json(R"({"vocab_size": -3, "hidden_size": 16, "intermediate_size": 40,
                               "num_hidden_layers": 2, "num_attention_heads": 4})");
  });
  EXPECT_TRUE(HasSubstr(m, "'vocab_size' is -3, expected a positive integer"));
  m = refusal(R"("max_position_embeddings": "long")");
  EXPECT_TRUE(HasSubstr(m, "'max_position_embeddings' is \"long\", expected a positive integer"));
  m = refusal(R"("rms_norm_eps": -1e-5)");
  EXPECT_TRUE(HasSubstr(m, "'rms_norm_eps' is -1e-05, expected a positive number"));
}

TEST(LlamaConfigTest, RefusesHeadsNotDividedByKvHeads) {
  const std::string m = refusal(R"("num_key_value_heads": 3)");
  EXPECT_TRUE(HasSubstr(m,
                        "'num_attention_heads' (4) is not a multiple of "
                        "'num_key_value_heads' (3)"));
}

TEST(LlamaConfigTest, AcceptsAHeadDimOfItsOwnButNotAnOddOne) {
  EXPECT_EQ(LlamaConfig::from_json(config_text(R"("head_dim": 8)")).head_dim, 8);
  EXPECT_TRUE(HasSubstr(refusal(R"("head_dim": 7)"), "'head_dim' is 7, expected an even number"));
}

TEST(LlamaConfigTest, RefusesOtherRopeScalings) {
  std::string m = refusal(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})");
  EXPECT_TRUE(HasSubstr(m, "'rope_scaling' of type 'llama3' has no 'low_freq_factor'"));
  m = refusal(R"("rope_scaling": {"type": "linear", "factor": 2.0})");
  EXPECT_TRUE(HasSubstr(m, "rope type 'linear'"));
  EXPECT_TRUE(HasSubstr(m, "Llama 3's 'llama3' scaling"));
  m = refusal(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0})");
  EXPECT_TRUE(HasSubstr(m, "'rope_parameters' has rope type 'yarn'"));
  m = refusal(
      R"("rope_scaling": {"rope_type": "llama3", "factor": 0.5, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})");
  EXPECT_TRUE(HasSubstr(m, "factor >= 1, got factor=0.5"));
}

// Qwen's use_sliding_window: the window on the layers from max_window_layers on (transformers'
// layer_types), written back as read.
TEST(LlamaConfigTest, QwenSlidingWindowFromMaxWindowLayers) {
  const LlamaConfig c = LlamaConfig::from_json(config_text(
      R"("model_type": "qwen2", "use_sliding_window": true, "sliding_window": 5,
         "max_window_layers": 1)"));
  EXPECT_EQ(c.window_of_layer(0), 0);
  EXPECT_EQ(c.window_of_layer(1), 5);
  EXPECT_EQ(LlamaConfig::from_json(c.to_json()), c);
  const LlamaConfig off =
      LlamaConfig::from_json(config_text(R"("model_type": "qwen3", "sliding_window": 5)"));
  EXPECT_EQ(off.window_of_layer(1), 0);  // use_sliding_window absent: no window
}

TEST(LlamaConfigTest, RefusesMlpBiasesQwenWindowsAndOtherActivations) {
  std::string m = refusal(R"("mlp_bias": true)");
  EXPECT_TRUE(HasSubstr(m, "'mlp_bias' is true"));
  m = refusal(R"("hidden_act": "gelu")");
  EXPECT_TRUE(HasSubstr(m, "hidden_act 'gelu' is not supported, expected 'silu'"));
  m = refusal(R"("model_type": "gemma2", "hidden_activation": "relu")");
  EXPECT_TRUE(HasSubstr(m, "hidden_activation 'relu' is not supported for 'gemma2'"));
  m = refusal(R"("model_type": "gemma2", "layer_types": ["full_attention", "full_attention"])");
  EXPECT_TRUE(HasSubstr(m, "'layer_types' is"));
  EXPECT_TRUE(HasSubstr(m, "the alternating pattern of Gemma 2"));
  LlamaConfig c = LlamaConfig::from_json(config_text());
  c.sliding_window = 8;  // a window on a family without one
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([&] { c.validate(); }),
                        "'sliding_window' is 8, expected 0 (none) for model_type 'llama'"));
}

TEST(LlamaConfigTest, RefusesMalformedJson) {
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { LlamaConfig::from_json("[1, 2]"); }),
                        "expected a JSON object"));
  EXPECT_TRUE(HasSubstr(ValueErrorMessage([] { LlamaConfig::from_json("{\"a\": 1, \"a\": 2}"); }),
                        "config.json:"));
}

TEST(LlamaConfigTest, MissingFileIsNotFoundNamingThePath) {
  try {
    LlamaConfig::from_file("/nonexistent/meshlayout/config.json");
    FAIL() << "no error";
  } catch (const NotFoundError& e) {
    EXPECT_TRUE(HasSubstr(e.what(), "/nonexistent/meshlayout/config.json"));
  }
}

}  // namespace
}  // namespace meshlayout
