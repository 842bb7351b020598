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
// The families LlamaConfig reads (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text,
// mixtral, qwen3_moe, qwen2_moe) have maps built from hf_llama_weight_mappings() with every
// weight the family may have (Llama's and Mistral's q/k/v/o biases under attention_bias, Qwen
// 2's q/k/v biases, Qwen 3's and Gemma 3's head norms, Gemma's decoder_block_* paths with
// heads-first q/k/v kernels, an untied lm_head, the mixtures' routers, experts, Qwen 2 MoE's
// shared expert and the Qwen mixtures' dense layers); hf_name_map_from_mappings of one
// model's mappings gives that model's exact map.
//
// Mixtures of experts: each expert's HF tensor is one slice of a stacked keras-hub kernel,
//   model.layers.*.block_sparse_moe.experts.*.w1.weight (F, hidden)
//     <-> transformer_layer_*/mixtral_sparse_moe_block/experts/
//         expert_feedforward_gate_dense (experts, hidden, F)
// the HF name's last `*` (the expert index) being the keras kernel's first dimension:
// hf_dim_of_keras_dim[0] is kHfExpertIndex, keras_dim_of_hf_dim = {2, 1}. keras-hub names
// the sparse blocks automatically (mixtral_sparse_moe_block, then _1, _2, … on later sparse
// layers), so such a tensor has two keras globs: `…_sparse_moe_block/…` and
// `…_sparse_moe_block_*/…`.
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

/// hf_dim_of_keras_dim's value for a stacked kernel's first dimension: the expert index.
inline constexpr int kHfExpertIndex = -2;

struct HfParamName {
  std::string hf_glob;  // "model.layers.*.self_attn.q_proj.weight"
  /// "transformer_layer_*/self_attention/query/kernel"; a sparse block's tensors two (the
  /// block's first automatic name and the numbered ones), first layer's first.
  std::vector<std::string> keras_globs;
  std::vector<int> keras_dim_of_hf_dim;
  std::vector<int> hf_dim_of_keras_dim;
  /// One slice (an expert) of a stacked keras kernel, whose first dimension is the experts.
  bool stacked() const {
    return !hf_dim_of_keras_dim.empty() && hf_dim_of_keras_dim[0] == kHfExpertIndex;
  }
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

/// The glob of a Hugging Face tensor name: every '.'-separated component of digits written `*`
/// ("model.layers.3.mlp.experts.7.up_proj.weight" ->
/// "model.layers.*.mlp.experts.*.up_proj.weight").
std::string hf_name_glob(std::string_view hf_name);

/// The map of `mappings` (one model's weights): in HF names every '.'-separated component of
/// digits (layers.3, experts.7) is written `*`, and in the keras-hub path of such a tensor its
/// first run of digits, the layer index (transformer_layer_3/, decoder_block_3/; later digits
/// are part of names, as ffw_gating_2), and a sparse block's automatic number
/// (mixtral_sparse_moe_block_1/); one entry per HF glob, its keras globs in order of first
/// appearance. ValueError if a reshape cannot be followed (a view dimension group that does
/// not multiply to its HF dimension).
HfNameMap hf_name_map_from_mappings(std::string family,
                                    const std::vector<HfWeightMapping>& mappings);

/// The map registered for `family` (a config.json model_type): llama, mistral, qwen2, qwen3,
/// gemma, gemma2, gemma3_text, mixtral, qwen3_moe and qwen2_moe built in. ValueError naming the
/// family and the registered ones otherwise.
const HfNameMap& hf_name_map(std::string_view family);

/// Registers `map` for each of `families` (replacing an earlier one).
void register_hf_name_map(const std::vector<std::string>& families, HfNameMap map);

/// The families with a registered map, sorted.
std::vector<std::string> hf_name_map_families();

}  // namespace meshlayout
