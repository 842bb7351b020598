// model_tensors.h — a model's tensors as rules see them, before anything is allocated: the
// path rules match (keras-hub's, as LlamaModel names its variables), the shape, the bytes the
// model holds, and what each dimension is — the config field it comes from (vocab_size,
// hidden_size, num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
// num_experts for a mixture's stacked (E, d, F) expert kernels, …) and
// the Hugging Face dimension it is the major part of (an nn.Linear weight is (out, in)).
// `rules suggest`, `rules check` and `rules diff` take their tensors from here only, and this
// takes them from the family's weight mappings (hf_llama_weight_mappings): a family added
// there is covered by all three.
//
// Example:
//   ModelTensors m = load_model_tensors("qwen2-dir");            // config.json: no weights read
//   for (const ModelTensor& t : m.tensors) std::cout << t.path << " " << t.bytes << "\n";
//   // transformer_layer_0/self_attention/query/kernel: dims {hidden_size,
//   //   num_attention_heads, head_dim}, hf_dims {1, 0, -1} (q_proj.weight is (out, in))
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/core/shape.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {

struct ModelTensor {
  std::string path;  // keras-hub path; a weights-only model: the file's tensor name
  Shape shape;
  int64_t bytes = 0;  // as the model holds it (F32); a weights-only model: in the file's dtype
  /// Per dimension: the config field it comes from ("num_attention_heads"), "" when unknown.
  std::vector<std::string> dims;
  /// The Hugging Face tensor ("model.layers.0.self_attn.q_proj.weight"; "" when none) and,
  /// per dimension, the HF dimension it is the major part of (-1: a minor part, or unknown).
  std::string hf_name;
  std::vector<int> hf_dims;
};

struct ModelTensors {
  std::string source;                 // for messages: the path given, and the family
  std::optional<LlamaConfig> config;  // none for a weights-only model
  std::vector<ModelTensor> tensors;
};

/// Every variable of a model of `config`, in the model's order. config.validate()'s ValueError.
std::vector<ModelTensor> model_tensors(const LlamaConfig& config);

/// `path` is a Hugging Face model directory (config.json: its tensors from the config alone,
/// no weight is read), or a weights-only model (a .safetensors file, an index, or a directory
/// without config.json: its tensors from the headers, by file name, dimensions unknown).
/// `family` replaces config.json's model_type (a Llama-shaped model under another name):
/// ValueError naming it when it is not one of kLlamaFamilies, or when there is no config.json.
ModelTensors load_model_tensors(const std::string& path,
                                const std::optional<std::string>& family = std::nullopt);

/// A layer's variables share one glob: the first path component that ends in a layer index
/// (transformer_layer_3, decoder_block_3, or an all-digit component as in layers.3) gets '*'
/// for it; other paths are their own glob.
std::string layer_glob(const std::string& path);

}  // namespace meshlayout
