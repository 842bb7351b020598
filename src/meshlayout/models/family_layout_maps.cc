// family_layout_maps.cc — see family_layout_maps.h.
#include "meshlayout/models/family_layout_maps.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

namespace {

// ValueError naming `function` unless both names are axes of the mesh (keras-hub's check).
void check_layout_map_axes(std::string_view function, const DeviceMesh& mesh,
                           const std::string& model_dim, const std::string& data_dim) {
  for (const std::string* name : {&model_dim, &data_dim}) {
    const auto& names = mesh.axis_names();
    if (std::find(names.begin(), names.end(), *name) == names.end()) {
      throw ValueError(fmt::format("{}: {} is not an axis of {} (its axes: {})", function,
                                   quote(*name), mesh.to_string(), fmt::join(names, ", ")));
    }
  }
}

}  // namespace

LayoutMap llama_layout_map(const DeviceMesh& mesh, const std::string& model_dim,
                           const std::string& data_dim) {
  check_layout_map_axes("llama_layout_map", mesh, model_dim, data_dim);
  const DimSharding model(model_dim), data(data_dim);
  LayoutMap rules(mesh);
  rules["token_embedding/embeddings"] = TensorLayout({model, data});
  rules["transformer_layer.*self_attention.*(query|key|value).kernel"] =
      TensorLayout({model, data, None});
  rules["transformer_layer.*attention_output.kernel"] = TensorLayout({model, None, data});
  rules["transformer_layer.*feedforward_intermediate_dense.kernel"] = TensorLayout({data, model});
  rules["transformer_layer.*feedforward_gate_dense.kernel"] = TensorLayout({data, model});
  rules["transformer_layer.*feedforward_output_dense.kernel"] = TensorLayout({model, data});
  return rules;
}

LayoutMap qwen_layout_map(const DeviceMesh& mesh, const std::string& model_dim,
                          const std::string& data_dim) {
  check_layout_map_axes("qwen_layout_map", mesh, model_dim, data_dim);
  const DimSharding model(model_dim), data(data_dim);
  LayoutMap out(mesh);
  out["token_embedding/embeddings"] = TensorLayout({model, data});
  out["token_embedding/reverse_embeddings"] = TensorLayout({model, data});
  out["transformer_layer.*self_attention.*query.kernel"] = TensorLayout({model, data, None});
  out["transformer_layer.*self_attention.*(key|value).kernel"] = TensorLayout({model, None, None});
  out["transformer_layer.*attention_output.kernel"] = TensorLayout({model, None, data});
  out["transformer_layer.*feedforward_intermediate_dense.kernel"] = TensorLayout({data, model});
  out["transformer_layer.*feedforward_gate_dense.kernel"] = TensorLayout({data, model});
  out["transformer_layer.*feedforward_output_dense.kernel"] = TensorLayout({model, data});
  return out;
}

LayoutMap gemma_layout_map(const DeviceMesh& mesh, const std::string& model_dim,
                           const std::string& data_dim) {
  check_layout_map_axes("gemma_layout_map", mesh, model_dim, data_dim);
  const DimSharding model(model_dim), data(data_dim);
  LayoutMap out(mesh);
  out["token_embedding/embeddings"] = TensorLayout({model, data});
  out["decoder_block.*attention.*(query|key|value).kernel"] = TensorLayout({model, data, None});
  out["decoder_block.*attention_output.kernel"] = TensorLayout({model, None, data});
  out["decoder_block.*ffw_gating.*kernel"] = TensorLayout({data, model});
  out["decoder_block.*ffw_linear.kernel"] = TensorLayout({model, data});
  return out;
}

namespace {

// keras-hub's rules for a sparse block's router and stacked experts (MixtralBackbone,
// Qwen3MoeBackbone): experts replicated, d over the data axis, F over the model axis.
void add_expert_rules(LayoutMap& rules, const DimSharding& model, const DimSharding& data) {
  rules["experts/expert_feedforward_(gate|intermediate)_dense"] = TensorLayout({None, data, model});
  rules["experts/expert_feedforward_output_dense"] = TensorLayout({None, model, data});
  rules["sparse_feedforward_gate_dense/kernel"] = TensorLayout({data, None});
}

}  // namespace

LayoutMap mixtral_layout_map(const DeviceMesh& mesh, const std::string& model_dim,
                             const std::string& data_dim) {
  check_layout_map_axes("mixtral_layout_map", mesh, model_dim, data_dim);
  const DimSharding model(model_dim), data(data_dim);
  LayoutMap out(mesh);
  out["token_embedding/embeddings"] = TensorLayout({model, data});
  out["token_embedding/reverse_embeddings"] = TensorLayout({data, model});
  out["transformer_layer.*self_attention.*query.kernel"] = TensorLayout({data, model, None});
  out["transformer_layer.*self_attention.*(key|value).kernel"] = TensorLayout({data, None, None});
  out["transformer_layer.*attention_output.kernel"] = TensorLayout({model, None, data});
  add_expert_rules(out, model, data);
  return out;
}

LayoutMap qwen3_moe_layout_map(const DeviceMesh& mesh, const std::string& model_dim,
                               const std::string& data_dim) {
  check_layout_map_axes("qwen3_moe_layout_map", mesh, model_dim, data_dim);
  const DimSharding model(model_dim), data(data_dim);
  LayoutMap out(mesh);
  out["token_embedding/embeddings"] = TensorLayout({model, data});
  out["token_embedding/reverse_embeddings"] = TensorLayout({model, data});
  out["transformer_layer.*self_attention.*query.kernel"] = TensorLayout({model, data, None});
  out["transformer_layer.*self_attention.*(key|value).kernel"] = TensorLayout({model, None, None});
  out["transformer_layer.*attention_output.kernel"] = TensorLayout({model, None, data});
  // The dense layers (mlp_only_layers) only: the router's path also ends in
  // feedforward_gate_dense/kernel.
  out["transformer_layer_[0-9]+/feedforward_(gate|intermediate)_dense/kernel"] =
      TensorLayout({data, model});
  out["transformer_layer_[0-9]+/feedforward_output_dense/kernel"] = TensorLayout({model, data});
  add_expert_rules(out, model, data);
  return out;
}

LayoutMap qwen2_moe_layout_map(const DeviceMesh& mesh, const std::string& model_dim,
                               const std::string& data_dim) {
  check_layout_map_axes("qwen2_moe_layout_map", mesh, model_dim, data_dim);
  const DimSharding model(model_dim), data(data_dim);
  LayoutMap out(mesh);
  out["token_embedding/embeddings"] = TensorLayout({model, data});
  out["token_embedding/reverse_embeddings"] = TensorLayout({data, model});
  out["transformer_layer.*self_attention.*query.kernel"] = TensorLayout({data, model, None});
  out["transformer_layer.*self_attention.*(key|value).kernel"] = TensorLayout({data, None, None});
  out["transformer_layer.*attention_output.kernel"] = TensorLayout({model, None, data});
  out["shared_expert_dense/feedforward_(gate|intermediate)_dense/kernel"] =
      TensorLayout({data, model});
  out["shared_expert_dense/feedforward_output_dense/kernel"] = TensorLayout({model, data});
  out["shared_expert_gate_dense/kernel"] = TensorLayout({data, None});
  // The dense layers (mlp_only_layers), split as the shared expert.
  out["transformer_layer_[0-9]+/feedforward_(gate|intermediate)_dense/kernel"] =
      TensorLayout({data, model});
  out["transformer_layer_[0-9]+/feedforward_output_dense/kernel"] = TensorLayout({model, data});
  add_expert_rules(out, model, data);
  return out;
}

LayoutMap family_layout_map(const LlamaConfig& config, const DeviceMesh& mesh,
                            const std::string& model_dim, const std::string& data_dim) {
  if (config.gemma()) return gemma_layout_map(mesh, model_dim, data_dim);
  if (config.family == "mixtral") return mixtral_layout_map(mesh, model_dim, data_dim);
  if (config.family == "qwen3_moe") return qwen3_moe_layout_map(mesh, model_dim, data_dim);
  if (config.family == "qwen2_moe") return qwen2_moe_layout_map(mesh, model_dim, data_dim);
  if (config.family == "qwen2" || config.family == "qwen3") {
    return qwen_layout_map(mesh, model_dim, data_dim);
  }
  return llama_layout_map(mesh, model_dim, data_dim);
}

}  // namespace meshlayout
