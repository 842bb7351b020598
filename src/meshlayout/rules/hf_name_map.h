// hf_name_map.h — per-family maps between Hugging Face tensor names and keras-hub variable
// paths, with how each tensor's dimensions move, for converting Hugging Face tensor-parallel
// plans to and from layouts on keras-hub paths.
//
// One entry per parameter, layer indices written `*` (as Hugging Face's plans write them):
//   model.layers.*.self_attn.q_proj.weight (heads*head_dim, hidden)
//     <-> transformer_layer_*/self_attention/query/kernel (hidden, heads, head_dim)
// keras_dim_of_hf_dim[h] is the keras dimension that holds the major part of HF dimension h
// (q_proj's dim 0, heads*head_dim, is keras dim 1, heads); hf_dim_of_keras_dim[k] is the HF
// dimension keras dimension k is the major part of, or -1 for a minor part (head_dim), which
// no HF plan can split alone. Splitting HF dim h in k blocks equals splitting keras dim
// keras_dim_of_hf_dim[h] in k blocks when k divides the major part (heads), as it must for
// tensor parallelism in both stacks.
//
// The families LlamaConfig reads (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text)
// have maps built from hf_llama_weight_mappings() with every weight the family may have
// (Llama's and Mistral's q/k/v/o biases under attention_bias, Qwen 2's q/k/v biases, Qwen 3's
// and Gemma 3's head norms, Gemma's decoder_block_* paths with heads-first q/k/v kernels, an
// untied lm_head); hf_name_map_from_mappings of one model's mappings gives that model's
// exact map.
// Another family registers its own with register_hf_name_map.
//
// Example:
//   const HfNameMap& names = hf_name_map("qwen2");
//   for (const HfParamName* p : names.module_params("model.layers.*.self_attn.q_proj")) …
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/models/hf_llama_checkpoint.h"

namespace meshlayout {

struct HfParamName {
  std::string hf_glob;     // "model.layers.*.self_attn.q_proj.weight"
  std::string keras_glob;  // "transformer_layer_*/self_attention/query/kernel"
  std::vector<int> keras_dim_of_hf_dim;
  std::vector<int> hf_dim_of_keras_dim;
  int hf_rank() const { return static_cast<int>(keras_dim_of_hf_dim.size()); }
  int keras_rank() const { return static_cast<int>(hf_dim_of_keras_dim.size()); }
  /// "model.layers.*.self_attn.q_proj" (the module) and "weight" (the parameter).
  std::string module_glob() const;
  std::string param_name() const;
};

class HfNameMap {
 public:
  HfNameMap(std::string family, std::vector<HfParamName> params);
  const std::string& family() const { return family_; }
  const std::vector<HfParamName>& params() const { return params_; }
  /// The parameters of a module ("model.layers.*.mlp.up_proj"), in map order; empty when
  /// the map has no such module.
  std::vector<const HfParamName*> module_params(std::string_view module_glob) const;

 private:
  std::string family_;
  std::vector<HfParamName> params_;
};

/// The map of `mappings` (one model's weights): in HF names every '.'-separated component of
/// digits (layers.3, experts.7) is written `*`, and in the keras-hub path of such a tensor its
/// first run of digits, the layer index (transformer_layer_3/, decoder_block_3/; later digits
/// are part of names, as ffw_gating_2); duplicates (the same globs from several layers) kept
/// once. ValueError if a reshape cannot be
/// followed (a view dimension group that does not multiply to its HF dimension).
HfNameMap hf_name_map_from_mappings(std::string family,
                                    const std::vector<HfWeightMapping>& mappings);

/// The map registered for `family` (a config.json model_type): llama, mistral, qwen2, qwen3,
/// gemma, gemma2 and gemma3_text built in. ValueError naming the family and the registered ones
/// otherwise.
const HfNameMap& hf_name_map(std::string_view family);

/// Registers `map` for each of `families` (replacing an earlier one).
void register_hf_name_map(const std::vector<std::string>& families, HfNameMap map);

/// The families with a registered map, sorted.
std::vector<std::string> hf_name_map_families();

}  // namespace meshlayout
