#include "meshlayout/rules/hf_name_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

// "model.layers.3.mlp.up_proj.weight" -> "model.layers.*.mlp.up_proj.weight": every
// '.'-separated component made of digits (a layer or expert index) becomes '*'.
std::string hf_glob_of(std::string_view name, bool* starred) {
  std::string out;
  *starred = false;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string_view part =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (all_digits(part)) {
      out += '*';
      *starred = true;
    } else {
      out += part;
    }
    if (dot == std::string_view::npos) return out;
    out += '.';
    start = dot + 1;
  }
}

// The keras-hub path of a per-layer tensor has its layer index as its first run of digits
// (transformer_layer_3/…, decoder_block_3/…; later digits are names: ffw_gating_2), and a
// sparse block's automatic name its own number (mixtral_sparse_moe_block_1/).
std::string keras_glob_of(std::string_view path, bool per_layer) {
  std::string out(path);
  if (!per_layer) return out;
  const size_t first = out.find_first_of("0123456789");
  if (first == std::string::npos) return out;
  size_t end = first;
  while (end < out.size() && std::isdigit(static_cast<unsigned char>(out[end]))) ++end;
  out.replace(first, end - first, 1, '*');  // (char form: g++ 12 -O3 -Wrestrict)
  constexpr std::string_view kBlock = "_sparse_moe_block_";
  const size_t block = out.find(kBlock);
  if (block != std::string::npos) {
    const size_t digits = block + kBlock.size();
    size_t stop = digits;
    while (stop < out.size() && std::isdigit(static_cast<unsigned char>(out[stop]))) ++stop;
    if (stop > digits) out.replace(digits, stop - digits, 1, '*');
  }
  return out;
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const HfNameMap>, std::less<>> maps;
  // Every map ever registered: a replaced map stays alive for references handed out.
  std::vector<std::shared_ptr<const HfNameMap>> kept;
};

// One layer of `family` with every optional weight present (untied lm_head; q/k/v/o biases
// where the family may have them: attention_bias for Llama and Mistral). Sizes are distinct
// so that reshapes group unambiguously.
HfNameMap llama_style_map(const std::string& family) {
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 1,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 8,
                .max_position_embeddings = 64};
  c.family = family;
  c.attention_bias = family == "llama" || family == "mistral";
  if (c.gemma()) c.query_pre_attn_scalar = 8;
  if (family == "gemma3_text") {
    c.sliding_window_pattern = 2;
    c.rope_local_base_freq = 10000;
  }
  if (family == "mixtral" || family == "qwen3_moe" || family == "qwen2_moe") {
    // Three layers: a sparse block under its first automatic name, a dense layer (the Qwen
    // mixtures' mlp_only_layers; Mixtral's are all sparse), a numbered sparse block.
    c.num_hidden_layers = 3;
    c.num_experts = 2;
    c.num_experts_per_tok = 1;
    c.moe_intermediate_size = 16;
    if (family != "mixtral") c.mlp_only_layers = {1};
    if (family == "qwen2_moe") c.shared_expert_intermediate_size = 24;
  }
  return hf_name_map_from_mappings(family, hf_llama_weight_mappings(c));
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    for (const char* f : {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                          "mixtral", "qwen3_moe", "qwen2_moe"}) {
      reg->maps[f] = std::make_shared<const HfNameMap>(llama_style_map(f));
    }
    return reg;
  }();
  return *r;
}

}  // namespace

std::string HfParamName::module_glob() const {
  size_t dot = hf_glob.rfind('.');
  return dot == std::string::npos ? hf_glob : hf_glob.substr(0, dot);
}

std::string HfParamName::param_name() const {
  size_t dot = hf_glob.rfind('.');
  return dot == std::string::npos ? std::string() : hf_glob.substr(dot + 1);
}

HfNameMap::HfNameMap(std::string family, std::vector<HfParamName> params)
    : family_(std::move(family)), params_(std::move(params)) {}

std::vector<const HfParamName*> HfNameMap::module_params(std::string_view module_glob) const {
  std::vector<const HfParamName*> out;
  for (const HfParamName& p : params_) {
    if (p.module_glob() == module_glob) out.push_back(&p);
  }
  return out;
}

std::string hf_name_glob(std::string_view hf_name) {
  bool starred = false;
  return hf_glob_of(hf_name, &starred);
}

HfNameMap hf_name_map_from_mappings(std::string family,
                                    const std::vector<HfWeightMapping>& mappings) {
  std::vector<HfParamName> params;
  for (const HfWeightMapping& m : mappings) {
    bool per_layer = false;
    HfParamName p{.hf_glob = hf_glob_of(m.hf_name, &per_layer)};
    const std::string keras = keras_glob_of(m.keras_path, per_layer);
    auto seen = std::find_if(params.begin(), params.end(),
                             [&](const HfParamName& q) { return q.hf_glob == p.hf_glob; });
    if (seen != params.end()) {
      auto& globs = seen->keras_globs;
      if (std::find(globs.begin(), globs.end(), keras) == globs.end()) globs.push_back(keras);
      continue;
    }
    p.keras_globs = {keras};
    // A stacked kernel's slice: view dimension 0 (of size 1) is the expert index, the others
    // reshape the HF tensor.
    const size_t skip = m.stack_index >= 0 ? 1 : 0;
    if (skip == 1 && (m.view_shape.empty() || m.view_shape[0] != 1)) {
      throw ValueError(fmt::format(
          "HF name map of {}: tensor {} is slice {} of a stacked variable but its view ({}) "
          "does not start with the slice's dimension of size 1",
          family, quote(m.hf_name), m.stack_index, fmt::join(m.view_shape, ", ")));
    }
    // Group the view's dimensions by the HF dimension they reshape from (row-major).
    std::vector<int> hf_of_view(m.view_shape.size(), -1);
    std::vector<bool> major(m.view_shape.size(), false);
    size_t v = skip;
    for (size_t h = 0; h < m.hf_shape.size(); ++h) {
      int64_t product = 1;
      const size_t first = v;
      while (v < m.view_shape.size() && (v == first || product < m.hf_shape[h])) {
        product *= m.view_shape[v];
        hf_of_view[v] = static_cast<int>(h);
        ++v;
        if (product == m.hf_shape[h]) break;
      }
      if (product != m.hf_shape[h]) {
        throw ValueError(fmt::format(
            "HF name map of {}: tensor {} of shape ({}) is not a row-major reshape of its view "
            "({}) at dimension {}",
            family, quote(m.hf_name), fmt::join(m.hf_shape, ", "), fmt::join(m.view_shape, ", "),
            h));
      }
      major[first] = true;
    }
    p.keras_dim_of_hf_dim.assign(m.hf_shape.size(), -1);
    for (size_t k = 0; k < m.perm.size(); ++k) {
      const auto view = static_cast<size_t>(m.perm[k]);
      if (view < skip) {
        p.hf_dim_of_keras_dim.push_back(kHfExpertIndex);
        continue;
      }
      const int h = hf_of_view[view];
      p.hf_dim_of_keras_dim.push_back(major[view] ? h : -1);
      if (major[view]) p.keras_dim_of_hf_dim[static_cast<size_t>(h)] = static_cast<int>(k);
    }
    params.push_back(std::move(p));
  }
  return HfNameMap(std::move(family), std::move(params));
}

const HfNameMap& hf_name_map(std::string_view family) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.maps.find(family);
  if (it == r.maps.end()) {
    std::vector<std::string> known;
    for (const auto& [name, map] : r.maps) known.push_back(name);
    throw ValueError(
        fmt::format("no Hugging Face name map for the model family {}; families with one: {}",
                    quote(family), fmt::join(known, ", ")));
  }
  return *it->second;
}

void register_hf_name_map(const std::vector<std::string>& families, HfNameMap map) {
  Registry& r = registry();
  auto shared = std::make_shared<const HfNameMap>(std::move(map));
  std::lock_guard lock(r.mutex);
  r.kept.push_back(shared);
  for (const std::string& f : families) r.maps[f] = shared;
}

std::vector<std::string> hf_name_map_families() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [name, map] : r.maps) out.push_back(name);
  return out;
}

}  // namespace meshlayout
