// generate_test_util.h — (test-only) a tiny random Llama written as a Hugging Face directory,
// for the generate command's unit tests and its end-to-end ctests (tiny_llama_writer.cc).
//
// Example:
//   write_tiny_llama("/tmp/tiny-llama");   // config.json + model.safetensors, ~20 KiB
//   LlamaConfig c = tiny_generate_config();
#pragma once

#include <map>
#include <string>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout::testing {

/// vocab 64, hidden 16, 2 layers, 4 heads (head_dim 4), 2 key-value heads, ff 32.
inline LlamaConfig tiny_generate_config() {
  return LlamaConfig{.vocab_size = 64, .hidden_size = 16, .intermediate_size = 32,
                     .num_hidden_layers = 2, .num_attention_heads = 4,
                     .num_key_value_heads = 2, .head_dim = 4, .rms_norm_eps = 1e-5,
                     .max_position_embeddings = 64};
}

/// Writes `dir`/config.json and `dir`/model.safetensors (F32; `num_shards` > 1: sharded with
/// an index) of tiny_generate_config(): the model's own random initial weights on one device,
/// kernels and embeddings scaled by 8 so the logits are far from uniform (greedy choices then
/// have margins far above float rounding, on any layout).
inline void write_tiny_llama(const std::string& dir, int num_shards = 1) {
  clear_session();
  const DeviceMesh one({1}, {"model"}, std::vector<std::string>{list_devices()[0]});
  LlamaModel model(tiny_generate_config(), LayoutMap(one));
  std::map<std::string, Array> scaled;
  for (const auto& [path, array] : model.variables_by_path()) {
    HostTensor t = array->gather();
    if (path.find("/scale") == std::string::npos) {
      float* p = t.data_as<float>();
      for (int64_t i = 0; i < t.num_elements(); ++i) p[i] *= 8.0f;
    }
    scaled.emplace(path, distribute_tensor(t, TensorLayout::replicated(static_cast<int>(t.shape().size()), one)));
  }
  std::map<std::string, const Array*> arrays;
  for (const auto& [path, array] : scaled) arrays.emplace(path, &array);
  save_hf_llama(dir, model.config(), arrays, DType::kF32, num_shards);
}

}  // namespace meshlayout::testing
