// demo_model.h — the model `meshlayout demo` builds, writes and shards, per family: a small
// config whose every dimension the keras-hub rules split divides its axis on the demo's 2x4
// mesh, what the demo says of it, the keras-hub backbone it names, and the Megatron-style
// rules (expert parallelism for the mixtures of experts) it reloads the saved model into.
//
// The Llama: grouped-query attention (8 query heads share 2 key/value heads), tied embeddings
// (as Llama 3.2 1B), two blocks; the Megatron reload splits the 2 key/value heads over 4
// devices. The other families change what distinguishes them: Mistral a sliding window shorter
// than the prompt, Qwen 2 q/k/v biases, Qwen 3 q/k head norms and a head_dim of its own (24,
// not 128/8), Gemma keras-hub's Gemma block, Gemma 2 also post norms, soft caps and a window on
// layer 0, Gemma 3 a local-rope sliding layer and a global one, Mixtral / Qwen 3 MoE / Qwen 2
// MoE experts (the Qwen MoEs with a dense layer 0, Qwen 2 MoE a shared expert).
//
// Example:
//   const LlamaConfig c = demo_llama_config("qwen2");   // validated
//   out << demo_family_story(c);                        // "Qwen 2 (Qwen2ForCausalLM), q/k/v
//   biases" LlamaModel model(c, demo_megatron_rules(mesh, c));  // mesh axes "batch" and "model"
#pragma once

#include <string>

#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/llama.h"

namespace meshlayout::cli {

/// The demo's config of `family` (llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text,
/// mixtral, qwen3_moe or qwen2_moe), validated.
LlamaConfig demo_llama_config(const std::string& family);

/// What the demo says of the family's model: its Hugging Face class and what distinguishes it,
/// e.g. "Mistral (MistralForCausalLM), sliding window of 4 keys".
std::string demo_family_story(const LlamaConfig& config);

/// The keras-hub backbone whose get_layout_map the demo's first rules are: "Llama" for
/// LlamaBackbone, "Qwen", "QwenMoe", "Qwen3Moe", "Gemma", "Mistral" or "Mixtral".
std::string demo_backbone_name(const LlamaConfig& config);

/// Megatron tensor parallelism on the mesh's "model" axis (examples/rules/llama_megatron.json):
/// vocab-parallel embeddings, column-parallel q/k/v, gate and up projections, row-parallel
/// output projections; q/k/v biases (Qwen 2, examples/rules/qwen_megatron.json) split on their
/// heads; keras-hub's Gemma names for the Gemmas; for a mixture of experts each device of the
/// model axis holds its experts (and Qwen 2 MoE's shared expert is split as an MLP).
LayoutMap demo_megatron_rules(const DeviceMesh& mesh, const LlamaConfig& config);

}  // namespace meshlayout::cli
