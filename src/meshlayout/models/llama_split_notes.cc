#include "meshlayout/models/llama_split_notes.h"

#include <fmt/format.h>

#include <algorithm>

#include <map>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/ops/attention.h"

namespace meshlayout {
namespace {

// The total size of the mesh axes `d` splits over (1 when not split).
int64_t split_size(const DimSharding& d, const DeviceMesh& mesh) {
  int64_t n = 1;
  for (const std::string& axis : d.axes()) n *= mesh.axis_size(axis);
  return n;
}

std::string axes_text(const DimSharding& d, const DeviceMesh& mesh) {
  std::string out;
  for (const std::string& axis : d.axes()) {
    out += fmt::format("{}{} ({})", out.empty() ? "" : " x ", quote(axis), mesh.axis_size(axis));
  }
  return out;
}

// Dimension `dim` of `path`'s layout under the rules (None when no rule or no such dim).
DimSharding dim_of(const LayoutMap& rules, const std::string& path, size_t dim) {
  const std::optional<TensorLayout> layout = rules.get(path);
  if (!layout || layout->axes().size() <= dim) return DimSharding();
  return layout->axes()[dim];
}

}  // namespace

std::vector<std::string> llama_split_notes(const LlamaConfig& config, const LayoutMap& rules) {
  config.validate();
  if (!rules.device_mesh()) {
    throw ValueError("llama_split_notes needs rules with a mesh (LayoutMap(mesh))");
  }
  const DeviceMesh& mesh = *rules.device_mesh();
  const int64_t H = config.num_attention_heads, Hkv = config.num_key_value_heads;
  // keras-hub's names: Gemma's decoder_block_{i}/attention with its q/k/v kernels heads first
  // (heads, d, head_dim), or the Llama block's transformer_layer_{i}/self_attention
  // (d, heads, head_dim).
  const bool gemma = config.gemma();
  const std::string block = gemma ? "decoder_block_" : "transformer_layer_";
  const std::string attention = gemma ? "attention" : "self_attention";
  const size_t heads_dim = gemma ? 0 : 1;
  // Each note (keyed by its text with the layer index made "*") with the first layer's text and
  // how many layers have it, in first-seen order.
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::string, int64_t>> seen;
  const auto note = [&](int64_t layer, const std::string& text) {
    std::string key = text;
    if (layer >= 0) {
      const std::string index = fmt::format("{}{}/", block, layer);
      for (size_t at = key.find(index); at != std::string::npos; at = key.find(index, at)) {
        key.replace(at, index.size(), block + "*/");
      }
      if (config.sparse_layer(layer)) {  // mixtral_sparse_moe_block_1 → *
        const std::string name = config.sparse_block_name(layer) + "/";
        for (size_t at = key.find(name); at != std::string::npos; at = key.find(name, at)) {
          key.replace(at, name.size(), "*/");
        }
      }
    }
    auto [it, inserted] = seen.try_emplace(key, text, 0);
    if (inserted) order.push_back(key);
    ++it->second.second;
  };
  const auto uneven = [&](int64_t layer, const std::string& path, size_t dim, int64_t size,
                          const char* what, const char* instead) {
    const DimSharding d = dim_of(rules, path, dim);
    const int64_t n = split_size(d, mesh);
    if (n > 1 && size % n != 0) {
      note(layer, fmt::format("{} ({}) split over {} by {}: {} does not divide by {}; {}", what,
                              size, axes_text(d, mesh), quote(path), size, n, instead));
    }
  };
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = fmt::format("{}{}/", block, i);
    const std::string query = p + attention + "/query/kernel";
    const std::string key = p + attention + "/key/kernel";
    uneven(i, query, heads_dim, H, "the query heads",
           "uneven head blocks: each device attends with the heads it holds");
    uneven(i, key, heads_dim, Hkv, "the key/value heads",
           "uneven blocks of key/value heads in the projections");
    for (const std::string& path : {query, key, p + attention + "/value/kernel"}) {
      const DimSharding hd = dim_of(rules, path, 2);
      if (hd.is_sharded()) {
        note(i, fmt::format("head_dim ({}) split over {} by {}: it is gathered whole on every "
                            "device before the rotary embedding and the attention scores",
                            config.head_dim, axes_text(hd, mesh), quote(path)));
      }
    }
    // The attention's layout of k and v for q's head split (the projections give q its heads
    // dimension as the query kernel splits it).
    const DimSharding q_heads = dim_of(rules, query, heads_dim);
    if (q_heads.is_sharded()) {
      bool replicated = false;
      (void)attention_kv_layout(TensorLayout({None, None, q_heads, None}, mesh), H, Hkv,
                                &replicated);
      if (replicated) {
        note(i, fmt::format(
                    "the {} key/value heads do not split like the {} query heads over {} (by {}): "
                    "each device keeps all {} key/value heads (their projections and the "
                    "generation cache are replicated over {}) and uses the ones its query "
                    "heads need",
                    Hkv, H, axes_text(q_heads, mesh), quote(query), Hkv, axes_text(q_heads, mesh)));
      }
    }
    if (config.sparse_layer(i)) {  // the stacked experts (E, d, F) and (E, F, d)
      const std::string experts = p + config.sparse_block_name(i) + "/experts/";
      const std::string gate = experts + "expert_feedforward_gate_dense";
      uneven(i, gate, 0, config.num_experts, "the experts",
             "uneven expert blocks: devices hold different numbers of experts (the tokens routed "
             "to the larger blocks take longer; the result is exact)");
      uneven(i, gate, 2, config.expert_intermediate_size(), "the experts' width",
             "uneven column blocks, summed as they are");
      const DimSharding d = dim_of(rules, gate, 1);
      if (d.is_sharded()) {
        note(i, fmt::format("the experts' input dimension ({}) split over {} by {}: the kernels "
                            "are gathered whole over it at every call (as FSDP does)",
                            config.hidden_size, axes_text(d, mesh), quote(gate)));
      }
      // Tokens split over the experts' own axis (ModelParallel splits the batch over the mesh's
      // first axis): gathered over it first, their outputs reduce-scattered back.
      const DimSharding e = dim_of(rules, gate, 0);
      const std::string& batch_axis = mesh.axis_names()[0];
      if (std::find(e.axes().begin(), e.axes().end(), batch_axis) != e.axes().end() &&
          mesh.axis_size(batch_axis) > 1) {
        note(i, fmt::format("the experts split over the batch axis {} by {}: each device "
                            "gathers the tokens of its {} group, runs its experts on the ones "
                            "routed to them, and the outputs are reduce-scattered back",
                            quote(batch_axis), quote(gate), quote(batch_axis)));
      }
      continue;
    }
    for (const char* ff : {gemma ? "ffw_gating" : "feedforward_gate_dense",
                           gemma ? "ffw_gating_2" : "feedforward_intermediate_dense"}) {
      uneven(i, p + ff + "/kernel", 1, config.intermediate_size, "the feed-forward width",
             "uneven column blocks (the row-parallel output projection sums them as they are)");
    }
    uneven(i, p + (gemma ? "ffw_linear" : "feedforward_output_dense") + "/kernel", 0,
           config.intermediate_size, "the feed-forward width", "uneven row blocks");
  }
  uneven(-1, "token_embedding/embeddings", 0, config.vocab_size, "the vocabulary",
         "uneven vocabulary blocks: lookups and the vocab-parallel cross-entropy use them as they "
         "are");
  if (!config.tie_word_embeddings) {
    uneven(-1, "token_embedding/reverse_embeddings", 1, config.vocab_size, "the vocabulary",
           "uneven logit blocks");
  }
  std::vector<std::string> out;
  for (const std::string& key : order) {
    const auto& [text, count] = seen.at(key);
    out.push_back(count > 1 ? fmt::format("{} (and the same in {} more layers)", text, count - 1)
                            : text);
  }
  return out;
}

}  // namespace meshlayout
