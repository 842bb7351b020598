// random_moe_hf.h — small mixture-of-experts decoders with random weights written as Hugging
// Face directories (config.json + model.safetensors), as the Hub ships them, for tests, demos
// and benchmarks:
//   mixtral    MixtralForCausalLM   every layer a MoE: model.layers.{i}.block_sparse_moe.gate,
//                                   …experts.{e}.w1 (gate), w3 (up), w2 (down); Mistral's
//                                   attention (sliding_window or none); top-k renormalised
//   qwen2_moe  Qwen2MoeForCausalLM  model.layers.{i}.mlp.gate, mlp.experts.{e}.{gate,up,down}_proj,
//                                   mlp.shared_expert.* and mlp.shared_expert_gate; q/k/v biases;
//                                   dense layers (mlp.{gate,up,down}_proj, intermediate_size) by
//                                   mlp_only_layers / decoder_sparse_step
//   qwen3_moe  Qwen3MoeForCausalLM  Qwen 3's q/k norms and head_dim; no shared expert
// HfMoeSpec describes such a model independently of meshlayout's own config parsing (the
// float64 reference, hf_moe_reference.h, reads the same struct).
//
// Example:
//   HfMoeSpec spec = small_hf_moe_spec("qwen2_moe");     // shared expert, layer 1 dense
//   std::map<std::string, HostTensor> w = random_hf_moe_tensors(spec, /*seed=*/7);
//   write_hf_moe("/tmp/qwen_moe", spec, w);              // config.json + model.safetensors
//   spec.is_moe_layer(1);                                // false: mlp_only_layers = [1]
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {

/// The mixture-of-experts families HfMoeSpec writes, as config.json's model_type names them.
inline constexpr std::string_view kHfMoeFamilies[] = {"mixtral", "qwen2_moe", "qwen3_moe"};

struct HfMoeSpec {
  /// The decoder's other fields: sizes, heads, head_dim, rms_norm_eps, rope_theta,
  /// tie_word_embeddings, max_position_embeddings, sliding_window (Mixtral only; 0: null),
  /// attention_bias (qwen3_moe). base.family is the model_type: "mixtral", "qwen2_moe" or
  /// "qwen3_moe". base.intermediate_size: Mixtral's experts' size; Qwen's dense layers' size.
  LlamaConfig base;
  int64_t num_experts = 0;                      // Mixtral: num_local_experts
  int64_t num_experts_per_tok = 0;              // k of the top-k router
  int64_t moe_intermediate_size = 0;            // Qwen: each routed expert's size
  int64_t shared_expert_intermediate_size = 0;  // qwen2_moe (> 0, required); 0 otherwise
  /// Qwen: renormalise the top-k weights to sum 1 (transformers' default false for both Qwen
  /// MoE configs; Qwen3-MoE checkpoints set true). Mixtral always renormalises.
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;       // Qwen: layer i is a MoE iff (i + 1) % step == 0 …
  std::vector<int64_t> mlp_only_layers;  // … and i is not listed here
  double router_aux_loss_coef = 0.001;

  /// Whether layer i is a sparse MoE block (transformers' rule: i not in mlp_only_layers and
  /// num_experts > 0 and (i + 1) % decoder_sparse_step == 0; Mixtral: every layer).
  bool is_moe_layer(int64_t i) const;
  /// Whether the top-k weights are divided by their sum (Mixtral, or norm_topk_prob).
  bool renormalizes() const { return base.family == "mixtral" || norm_topk_prob; }
  /// The routed experts' intermediate size (Mixtral: base.intermediate_size).
  int64_t expert_intermediate_size() const;
  /// The Hugging Face class: "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM".
  std::string architecture() const;

  /// ValueError naming the field, its value and what is expected: an unknown family, a size
  /// that is not positive, num_experts_per_tok outside [1, num_experts], heads not a multiple
  /// of key-value heads, qwen2_moe's head_dim other than hidden_size / num_attention_heads or
  /// a missing shared expert, a shared expert outside qwen2_moe, a decoder_sparse_step below
  /// 1, a mlp_only_layers entry outside [0, num_hidden_layers), Mixtral with
  /// mlp_only_layers/decoder_sparse_step, a sliding window outside Mixtral.
  void validate() const;
  /// config.json text as transformers writes it for the family (2-space indented, newline).
  std::string to_json() const;
};

/// A small model of `family` for tests (hidden 32, heads 4 / key-value heads 2, vocab 64):
///   mixtral    2 layers, 4 experts, top-2, expert size 24, sliding_window 3
///   qwen2_moe  3 layers, 4 experts, top-2, expert size 16, shared expert 24, dense layer 1
///              (mlp_only_layers [1], intermediate_size 48), norm_topk_prob false, tied
///   qwen3_moe  2 layers, 8 experts, top-2, expert size 16, head_dim 12, norm_topk_prob true
/// ValueError for another family.
HfMoeSpec small_hf_moe_spec(std::string_view family);

/// Every tensor of the spec's checkpoint, Hugging Face name → (out, in) shape, in the file's
/// order (embedding, layer by layer, norm, lm_head unless tied). Validates the spec.
std::vector<std::pair<std::string, Shape>> hf_moe_tensor_shapes(const HfMoeSpec& spec);

/// Every tensor with random F32 values (HostTensor::random, a seed per tensor from `seed`):
/// matrices and biases in [-1, 1) times `scale`, norm weights in [0.5, 1.5).
std::map<std::string, HostTensor> random_hf_moe_tensors(const HfMoeSpec& spec, uint64_t seed,
                                                        float scale = 1.0f);

/// Writes `dir` (created if missing): config.json (spec.to_json()) and model.safetensors
/// (F32, the tensors under their names, metadata format "pt"), each atomically, by process 0.
/// Collective: every process passes the same arguments. ValueError naming the tensor when
/// `tensors` lacks one of the spec's, has one it does not know, or one of another shape.
void write_hf_moe(const std::string& dir, const HfMoeSpec& spec,
                  const std::map<std::string, HostTensor>& tensors);

}  // namespace meshlayout
