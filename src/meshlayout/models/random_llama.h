// random_llama.h — a Llama with random weights written as a Hugging Face directory
// (config.json + safetensors): the demo's model, and a fixture for tests and benchmarks.
//
// The weights are LlamaModel(config)'s own initial values, drawn on one device; kernels and
// embeddings may be scaled up so that the logits are far from uniform (greedy choices then
// have margins far above float rounding, on any layout). Norm scales stay 1; biases (Qwen 2's,
// attention_bias) are drawn in [-0.5, 0.5) before that scaling, so that they matter.
//
// Example:
//   write_random_hf_llama("/tmp/llama", config, {.kernel_scale = 8, .file_dtype = DType::kBF16});
//   HfLlamaCheckpoint ckpt = HfLlamaCheckpoint::open("/tmp/llama");
//   write_token_file("/tmp/tokens.safetensors", random_token_rows(64, 17, config.vocab_size, 1));
#pragma once

#include <string>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/core/dtype.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {

struct RandomLlamaOptions {
  float kernel_scale = 1;          // multiplies every kernel and embedding (not the norm scales)
  DType file_dtype = DType::kF32;  // F32, BF16 or F16
  int num_shards = 1;              // > 1: model-0000k-of-0000n.safetensors with an index
};

/// Writes `dir` (created if missing) as save_hf_llama does. The model is drawn on the first
/// device of the default runtime, so the same config and session seed give the same weights.
/// ValueError from config.validate() or save_hf_llama; a kernel_scale that is not finite is a
/// ValueError naming it. Collective (every process passes the same arguments).
void write_random_hf_llama(const std::string& dir, const LlamaConfig& config,
                           const RandomLlamaOptions& options = {});

/// `rows` rows of `columns` token ids drawn uniformly from [0, vocab) (a fixed generator keyed
/// by `seed`): I32 (rows, columns). ValueError for non-positive sizes.
HostTensor random_token_rows(int64_t rows, int64_t columns, int64_t vocab, uint64_t seed);

/// Writes `tokens` (I32, rank 2) as the training data `meshlayout train` reads: a safetensors
/// file with the one tensor "tokens", written atomically by process 0. Collective.
void write_token_file(const std::string& path, const HostTensor& tokens);

}  // namespace meshlayout
