// llama_families_test_util.h — (test-only) one small configuration of each Llama-style family
// (Llama 2, Llama 3 with rope scaling, Mistral with a window, Qwen 2, Qwen 3, Llama with
// attention_bias) for the family tests, in process and under mpirun, and the relative error
// they check logits by.
//
// Example:
//   for (const Family& f : families()) { LlamaModel model(f.config, rules); … }
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout::testing {

struct Family {
  std::string what;
  LlamaConfig config;
};

inline LlamaConfig family_base(std::string family) {
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 2,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 8,
                .rms_norm_eps = 1e-5,
                .rope_theta = 10000.0,
                .max_position_embeddings = 64};
  c.family = std::move(family);
  return c;
}

inline std::vector<Family> families() {
  std::vector<Family> out;
  LlamaConfig llama2 = family_base("llama");
  llama2.num_key_value_heads = 4;
  out.push_back({"Llama 2 (MHA)", llama2});
  LlamaConfig llama3 = family_base("llama");
  // head_dim 8, theta 1e4: wavelengths 6.3, 63, 628, 6283 against 64/1 and 64/4: every band.
  llama3.rope_scaling = Llama3RopeScaling{.factor = 8.0,
                                          .low_freq_factor = 1.0,
                                          .high_freq_factor = 4.0,
                                          .original_max_position_embeddings = 64};
  llama3.tie_word_embeddings = true;
  out.push_back({"Llama 3 (rope scaling, tied)", llama3});
  LlamaConfig mistral = family_base("mistral");
  mistral.sliding_window = 3;
  out.push_back({"Mistral (window 3)", mistral});
  LlamaConfig qwen2 = family_base("qwen2");
  qwen2.tie_word_embeddings = true;
  out.push_back({"Qwen 2 (q/k/v biases, tied)", qwen2});
  LlamaConfig qwen3 = family_base("qwen3");
  qwen3.head_dim = 12;  // 4 heads x 12 = 48, hidden 32
  out.push_back({"Qwen 3 (q/k norms, head_dim 12)", qwen3});
  LlamaConfig llama_bias = family_base("llama");
  llama_bias.attention_bias = true;
  out.push_back({"Llama with attention_bias", llama_bias});
  LlamaConfig gemma = family_base("gemma");  // Gemma 1: GeGLU, (1 + scale) norms, sqrt(d)
  gemma.head_dim = 12;                       // 4 heads x 12 = 48, hidden 32
  gemma.query_pre_attn_scalar = 12;
  gemma.tie_word_embeddings = true;
  out.push_back({"Gemma (heads-first kernels, head_dim 12)", gemma});
  LlamaConfig gemma2 = family_base("gemma2");
  gemma2.head_dim = 16;
  gemma2.query_pre_attn_scalar = 24;  // not head_dim: the scale is its own
  gemma2.sliding_window = 3;          // layers 0, 2, …
  gemma2.attn_logit_softcapping = 1.5;
  gemma2.final_logit_softcapping = 4.0;  // small enough to bite on these logits
  gemma2.tie_word_embeddings = true;
  out.push_back({"Gemma 2 (post norms, soft caps, alternating window)", gemma2});
  LlamaConfig gemma3 = family_base("gemma3_text");  // q/k norms, local and global ropes
  gemma3.num_hidden_layers = 3;
  gemma3.head_dim = 16;
  gemma3.query_pre_attn_scalar = 16;
  gemma3.sliding_window = 3;
  gemma3.sliding_window_pattern = 3;  // layers 0, 1 sliding (local rope), layer 2 global
  gemma3.rope_local_base_freq = 10000;
  gemma3.rope_theta = 1e6;
  gemma3.rope_linear_factor = 8.0;
  gemma3.tie_word_embeddings = false;
  out.push_back({"Gemma 3 (q/k norms, local/global ropes, linear scaling)", gemma3});
  return out;
}

/// max |got − want| over max |want| (got F32).
inline double max_relative_error(const HostTensor& got, const std::vector<double>& want) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got.data_as<float>()[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return worst / scale;
}

}  // namespace meshlayout::testing
