// generate_test_util.h — (test-only) a tiny random Llama written as a Hugging Face directory,
// for the generate command's unit tests and its end-to-end ctests (tiny_llama_writer.cc).
//
// Example:
//   write_tiny_llama("/tmp/tiny-llama");   // config.json, model.safetensors (~20 KiB) and a
//                                          // 64-token tokenizer.json
//   LlamaConfig c = tiny_generate_config();
#pragma once

#include <map>
#include <string>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/tokenizers/toy_tokenizer.h"

namespace meshlayout::testing {

/// vocab 64, hidden 16, 2 layers, 4 heads (head_dim 4), 2 key-value heads, ff 32.
inline LlamaConfig tiny_generate_config() {
  return LlamaConfig{.vocab_size = 64,
                     .hidden_size = 16,
                     .intermediate_size = 32,
                     .num_hidden_layers = 2,
                     .num_attention_heads = 4,
                     .num_key_value_heads = 2,
                     .head_dim = 4,
                     .rms_norm_eps = 1e-5,
                     .max_position_embeddings = 64};
}

/// Writes `dir`/config.json and `dir`/model.safetensors (F32; `num_shards` > 1: sharded with
/// an index) of tiny_generate_config(): the model's own random initial weights, kernels and
/// embeddings scaled by 8 (write_random_hf_llama); and the toy tokenizer of its 64 tokens
/// (tokenizers/toy_tokenizer.h) for text prompts.
inline void write_tiny_llama(const std::string& dir, int num_shards = 1) {
  clear_session();
  write_random_hf_llama(dir, tiny_generate_config(), {.kernel_scale = 8, .num_shards = num_shards});
  tokenizers::write_toy_tokenizer(dir, tiny_generate_config().vocab_size);
}

}  // namespace meshlayout::testing
