// family_layout_maps.h — keras-hub's get_layout_map rules of every family the Llama-class decoder
// (llama.h) runs, on keras-hub's variable paths: one function per backbone, and
// family_layout_map picking the one of a config's family. examples/rules/<family>_keras_hub.json
// holds the same rules as files (a test keeps them equal).
//
// Example:
//   LayoutMap rules = mixtral_layout_map(mesh, "model", "batch");
//   rules["experts/expert_feedforward_.*"] = TensorLayout({"model", None, None});   // + experts
//   LlamaModel model(config, family_layout_map(config, mesh));
#pragma once

#include <string>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {

/// keras-hub's LlamaBackbone.get_layout_map(mesh, model_parallel_dim_name, data_parallel_dim_name)
/// rules (search mode). ValueError if either name is not an axis of the mesh.
LayoutMap llama_layout_map(const DeviceMesh& mesh, const std::string& model_dim = "model",
                           const std::string& data_dim = "batch");

/// keras-hub's QwenBackbone / Qwen3Backbone.get_layout_map rules: the Llama's, except that the
/// key/value kernels are split on their input dimension only (model, None, None: few KV heads
/// rarely divide the data axis) and the reverse embeddings follow the embeddings (model, batch).
/// ValueError if either name is not an axis of the mesh.
LayoutMap qwen_layout_map(const DeviceMesh& mesh, const std::string& model_dim = "model",
                          const std::string& data_dim = "batch");

/// keras-hub's GemmaBackbone.get_layout_map rules: embeddings (model, batch), the heads-first
/// q/k/v kernels (model, batch, None), attention_output (model, None, batch), ffw_gating and
/// ffw_gating_2 (batch, model), ffw_linear (model, batch). ValueError if either name is not an
/// axis of the mesh.
LayoutMap gemma_layout_map(const DeviceMesh& mesh, const std::string& model_dim = "model",
                           const std::string& data_dim = "batch");

/// keras-hub's MixtralBackbone.get_layout_map rules: embeddings (model, batch), reverse
/// embeddings (batch, model), query (batch, model, None), key/value (batch, None, None),
/// attention_output (model, None, batch), the stacked experts' gate/intermediate (None, batch,
/// model) and output (None, model, batch), the router (batch, None). For expert parallelism,
/// put a rule splitting the experts' first dimension before these (or replace them).
LayoutMap mixtral_layout_map(const DeviceMesh& mesh, const std::string& model_dim = "model",
                             const std::string& data_dim = "batch");

/// Qwen 3 MoE: qwen_layout_map's attention and dense feed-forward rules plus the experts' and
/// router's rules of mixtral_layout_map.
LayoutMap qwen3_moe_layout_map(const DeviceMesh& mesh, const std::string& model_dim = "model",
                               const std::string& data_dim = "batch");

/// keras-hub's QwenMoeBackbone.get_layout_map rules (Qwen 2 MoE): mixtral_layout_map's, plus
/// the shared expert's gate/intermediate (batch, model) and output (model, batch) kernels and
/// its gate (batch, None); the dense layers (mlp_only_layers) as the shared expert.
LayoutMap qwen2_moe_layout_map(const DeviceMesh& mesh, const std::string& model_dim = "model",
                               const std::string& data_dim = "batch");

/// keras-hub's get_layout_map of `config`'s family: qwen_layout_map for qwen2 / qwen3,
/// gemma_layout_map for gemma / gemma2, llama_layout_map for llama and mistral
/// (MistralBackbone's rules are the Llama's).
LayoutMap family_layout_map(const LlamaConfig& config, const DeviceMesh& mesh,
                            const std::string& model_dim = "model",
                            const std::string& data_dim = "batch");

}  // namespace meshlayout
