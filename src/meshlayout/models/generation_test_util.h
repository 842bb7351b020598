// generation_test_util.h — (test-only) the small Llama, prompts and sampling options that the
// generation tests share in process (generation_test.cc) and under mpirun
// (generation_mpi_test.cc), with the tokens sampling must give on every mesh.
//
// Example:
//   LlamaModel model(generation_test_config(), rules);
//   sharpen_weights(model);                       // logits far from uniform
//   generate(model, kSampledPrompts, sampled_options());   // == kSampledTokens
#pragma once

#include <cstdint>
#include <vector>

#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"

namespace meshlayout::testing {

/// vocab 48, hidden 32, 2 layers, 8 heads over 2 key/value heads of 4, window 64.
inline LlamaConfig generation_test_config() {
  return LlamaConfig{.vocab_size = 48,
                     .hidden_size = 32,
                     .intermediate_size = 40,
                     .num_hidden_layers = 2,
                     .num_attention_heads = 8,
                     .num_key_value_heads = 2,
                     .head_dim = 4,
                     .rms_norm_eps = 1e-5,
                     .rope_theta = 10000.0,
                     .tie_word_embeddings = false,
                     .max_position_embeddings = 64};
}

/// Multiplies every weight but the norm scales by `factor` (in place, every shard), so that
/// logits are spread and greedy choices have margins far above rounding.
inline void sharpen_weights(LlamaModel& model, float factor = 3) {
  for (auto& [path, array] : model.variables_by_path()) {
    if (path.find("layernorm") != std::string::npos) continue;
    for (Array::Shard& shard : array->local_shards()) {
      float* x = reinterpret_cast<float*>(shard.buffer.data());
      for (int64_t i = 0; i < shard.box.num_elements(); ++i) x[i] *= factor;
    }
  }
}

/// Two prompts of different lengths (so the batch is left-padded).
inline const std::vector<std::vector<int32_t>> kSampledPrompts = {{3, 17, 42, 5, 9}, {11, 2}};

inline GenerateOptions sampled_options(uint64_t seed = 7) {
  return GenerateOptions{.max_new_tokens = 8,
                         .do_sample = true,
                         .temperature = 1.3,
                         .top_k = 20,
                         .top_p = 0.95,
                         .seed = seed};
}

/// What sampled_options() gives for kSampledPrompts on the sharpened model, on one device, a
/// 2x4 mesh in process, and every mesh under mpirun.
inline const std::vector<std::vector<int32_t>> kSampledTokens = {{46, 11, 0, 20, 17, 25, 37, 13},
                                                                 {16, 39, 14, 13, 2, 32, 20, 20}};

}  // namespace meshlayout::testing
