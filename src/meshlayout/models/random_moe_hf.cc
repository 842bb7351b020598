#include "meshlayout/models/random_moe_hf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

void require_positive(std::string_view field, int64_t value) {
  if (value < 1) {
    throw ValueError(fmt::format("HfMoeSpec: {} is {}, expected a positive integer", field, value));
  }
}

// Writes `text` to `path` through a temporary file beside it and a rename.
void write_text_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error(fmt::format("writing {} failed", quote(tmp.string())));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(
        fmt::format("writing {} failed: renaming the temporary file", quote(path.string())));
  }
}

}  // namespace

bool HfMoeSpec::is_moe_layer(int64_t i) const {
  if (base.family == "mixtral") return true;
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) == mlp_only_layers.end() &&
         num_experts > 0 && (i + 1) % decoder_sparse_step == 0;
}

int64_t HfMoeSpec::expert_intermediate_size() const {
  return base.family == "mixtral" ? base.intermediate_size : moe_intermediate_size;
}

std::string HfMoeSpec::architecture() const {
  if (base.family == "mixtral") return "MixtralForCausalLM";
  if (base.family == "qwen2_moe") return "Qwen2MoeForCausalLM";
  return "Qwen3MoeForCausalLM";
}

void HfMoeSpec::validate() const {
  const std::string& f = base.family;
  if (std::find(std::begin(kHfMoeFamilies), std::end(kHfMoeFamilies), f) ==
      std::end(kHfMoeFamilies)) {
    throw ValueError(
        fmt::format("HfMoeSpec: family (model_type) is {}, expected \"mixtral\", \"qwen2_moe\" or "
                    "\"qwen3_moe\"",
                    quote(f)));
  }
  require_positive("vocab_size", base.vocab_size);
  require_positive("hidden_size", base.hidden_size);
  require_positive("intermediate_size", base.intermediate_size);
  require_positive("num_hidden_layers", base.num_hidden_layers);
  require_positive("num_attention_heads", base.num_attention_heads);
  require_positive("num_key_value_heads", base.num_key_value_heads);
  require_positive("head_dim", base.head_dim);
  require_positive("num_experts", num_experts);
  if (f != "mixtral") require_positive("moe_intermediate_size", moe_intermediate_size);
  if (num_experts_per_tok < 1 || num_experts_per_tok > num_experts) {
    throw ValueError(fmt::format("HfMoeSpec: num_experts_per_tok is {}, expected 1 to {} ({})",
                                 num_experts_per_tok, num_experts,
                                 f == "mixtral" ? "num_local_experts" : "num_experts"));
  }
  if (base.num_attention_heads % base.num_key_value_heads != 0) {
    throw ValueError(
        fmt::format("HfMoeSpec: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                    base.num_attention_heads, base.num_key_value_heads));
  }
  if (f == "qwen2_moe" && base.head_dim * base.num_attention_heads != base.hidden_size) {
    throw ValueError(fmt::format(
        "HfMoeSpec: qwen2_moe's head_dim is hidden_size / num_attention_heads = {}, got {}",
        base.hidden_size / base.num_attention_heads, base.head_dim));
  }
  if (f == "qwen2_moe") {
    require_positive("shared_expert_intermediate_size", shared_expert_intermediate_size);
  } else if (shared_expert_intermediate_size != 0) {
    throw ValueError(
        fmt::format("HfMoeSpec: shared_expert_intermediate_size is {}, but {} has no shared expert "
                    "(expected 0)",
                    shared_expert_intermediate_size, f));
  }
  if (decoder_sparse_step < 1) {
    throw ValueError(fmt::format("HfMoeSpec: decoder_sparse_step is {}, expected at least 1",
                                 decoder_sparse_step));
  }
  for (const int64_t i : mlp_only_layers) {
    if (i < 0 || i >= base.num_hidden_layers) {
      throw ValueError(fmt::format("HfMoeSpec: mlp_only_layers has {}, expected layers 0 to {}", i,
                                   base.num_hidden_layers - 1));
    }
  }
  if (f == "mixtral" && (!mlp_only_layers.empty() || decoder_sparse_step != 1)) {
    throw ValueError(fmt::format(
        "HfMoeSpec: mixtral has no dense layers, got mlp_only_layers {} and decoder_sparse_step "
        "{} (expected [] and 1)",
        repr_ints(mlp_only_layers), decoder_sparse_step));
  }
  if (f != "mixtral" && base.sliding_window != 0) {
    throw ValueError(fmt::format(
        "HfMoeSpec: sliding_window is {}, but {} is written with use_sliding_window false "
        "(expected 0)",
        base.sliding_window, f));
  }
  if (f == "qwen2_moe" && base.attention_bias) {
    throw ValueError(
        "HfMoeSpec: attention_bias is true; qwen2_moe has q/k/v biases and none "
        "on o_proj (expected false)");
  }
}

std::string HfMoeSpec::to_json() const {
  validate();
  using json = nlohmann::ordered_json;
  const std::string& f = base.family;
  json j;
  j["architectures"] = {architecture()};
  j["model_type"] = f;
  j["vocab_size"] = base.vocab_size;
  j["hidden_size"] = base.hidden_size;
  j["intermediate_size"] = base.intermediate_size;
  j["num_hidden_layers"] = base.num_hidden_layers;
  j["num_attention_heads"] = base.num_attention_heads;
  j["num_key_value_heads"] = base.num_key_value_heads;
  if (f != "qwen2_moe") j["head_dim"] = base.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = base.max_position_embeddings;
  j["rms_norm_eps"] = base.rms_norm_eps;
  j["rope_theta"] = base.rope_theta;
  j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = base.tie_word_embeddings;
  j["attention_dropout"] = 0.0;
  if (f == "mixtral") {
    j["sliding_window"] = base.sliding_window > 0 ? json(base.sliding_window) : json(nullptr);
    j["num_local_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["router_jitter_noise"] = 0.0;
  } else {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    if (f == "qwen3_moe") j["attention_bias"] = base.attention_bias;
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["moe_intermediate_size"] = moe_intermediate_size;
    if (f == "qwen2_moe") j["shared_expert_intermediate_size"] = shared_expert_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
  }
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = router_aux_loss_coef;
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

HfMoeSpec small_hf_moe_spec(std::string_view family) {
  HfMoeSpec s;
  s.base = LlamaConfig{.vocab_size = 64,
                       .hidden_size = 32,
                       .intermediate_size = 48,
                       .num_hidden_layers = 2,
                       .num_attention_heads = 4,
                       .num_key_value_heads = 2,
                       .head_dim = 8,
                       .rms_norm_eps = 1e-5,
                       .rope_theta = 10000.0,
                       .max_position_embeddings = 64};
  s.base.family = std::string(family);
  s.num_experts_per_tok = 2;
  if (family == "mixtral") {
    s.base.intermediate_size = 24;
    s.base.sliding_window = 3;
    s.num_experts = 4;
  } else if (family == "qwen2_moe") {
    s.base.num_hidden_layers = 3;
    s.base.tie_word_embeddings = true;
    s.num_experts = 4;
    s.moe_intermediate_size = 16;
    s.shared_expert_intermediate_size = 24;
    s.mlp_only_layers = {1};
  } else if (family == "qwen3_moe") {
    s.base.head_dim = 12;  // 4 heads x 12 = 48, hidden 32
    s.num_experts = 8;
    s.moe_intermediate_size = 16;
    s.norm_topk_prob = true;
  } else {
    throw ValueError(fmt::format(
        "small_hf_moe_spec: family is {}, expected 'mixtral', 'qwen2_moe' or 'qwen3_moe'",
        quote(family)));
  }
  s.validate();
  return s;
}

std::vector<std::pair<std::string, Shape>> hf_moe_tensor_shapes(const HfMoeSpec& spec) {
  spec.validate();
  const LlamaConfig& c = spec.base;
  const int64_t d = c.hidden_size, H = c.num_attention_heads, Hkv = c.num_key_value_heads,
                D = c.head_dim, E = spec.num_experts, ff = spec.expert_intermediate_size();
  const bool mixtral = c.family == "mixtral";
  std::vector<std::pair<std::string, Shape>> out = {
      {"model.embed_tokens.weight", {c.vocab_size, d}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "input_layernorm.weight", {d}});
    out.push_back({p + "self_attn.q_proj.weight", {H * D, d}});
    out.push_back({p + "self_attn.k_proj.weight", {Hkv * D, d}});
    out.push_back({p + "self_attn.v_proj.weight", {Hkv * D, d}});
    out.push_back({p + "self_attn.o_proj.weight", {d, H * D}});
    if (c.family == "qwen2_moe" || c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {H * D}});
      out.push_back({p + "self_attn.k_proj.bias", {Hkv * D}});
      out.push_back({p + "self_attn.v_proj.bias", {Hkv * D}});
      if (c.attention_bias) out.push_back({p + "self_attn.o_proj.bias", {d}});
    }
    if (c.family == "qwen3_moe") {
      out.push_back({p + "self_attn.q_norm.weight", {D}});
      out.push_back({p + "self_attn.k_norm.weight", {D}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {d}});
    if (!spec.is_moe_layer(i)) {
      out.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, d}});
      out.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, d}});
      out.push_back({p + "mlp.down_proj.weight", {d, c.intermediate_size}});
      continue;
    }
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    out.push_back({moe + "gate.weight", {E, d}});
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = fmt::format("{}experts.{}.", moe, e);
      out.push_back({x + (mixtral ? "w1.weight" : "gate_proj.weight"), {ff, d}});
      out.push_back({x + (mixtral ? "w3.weight" : "up_proj.weight"), {ff, d}});
      out.push_back({x + (mixtral ? "w2.weight" : "down_proj.weight"), {d, ff}});
    }
    if (c.family == "qwen2_moe") {
      const int64_t fs = spec.shared_expert_intermediate_size;
      out.push_back({moe + "shared_expert.gate_proj.weight", {fs, d}});
      out.push_back({moe + "shared_expert.up_proj.weight", {fs, d}});
      out.push_back({moe + "shared_expert.down_proj.weight", {d, fs}});
      out.push_back({moe + "shared_expert_gate.weight", {1, d}});
    }
  }
  out.push_back({"model.norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, d}});
  return out;
}

std::map<std::string, HostTensor> random_hf_moe_tensors(const HfMoeSpec& spec, uint64_t seed,
                                                        float scale) {
  std::map<std::string, HostTensor> out;
  for (const auto& [name, shape] : hf_moe_tensor_shapes(spec)) {
    HostTensor t = HostTensor::random(DType::kF32, shape, seed++);
    float* v = t.data_as<float>();
    const bool norm = name.find("norm") != std::string::npos;
    for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = norm ? 1.0f + 0.5f * v[i] : scale * v[i];
    out.emplace(name, std::move(t));
  }
  return out;
}

void write_hf_moe(const std::string& dir, const HfMoeSpec& spec,
                  const std::map<std::string, HostTensor>& tensors) {
  const std::vector<std::pair<std::string, Shape>> shapes = hf_moe_tensor_shapes(spec);
  for (const auto& [name, shape] : shapes) {
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      throw ValueError(fmt::format("write_hf_moe: tensor {} is missing", quote(name)));
    }
    if (it->second.shape() != shape || it->second.dtype() != DType::kF32) {
      throw ValueError(fmt::format("write_hf_moe: tensor {} is {} {}, expected F32 {}", quote(name),
                                   dtype_name(it->second.dtype()),
                                   shape_to_string(it->second.shape()), shape_to_string(shape)));
    }
  }
  if (tensors.size() != shapes.size()) {
    for (const auto& [name, t] : tensors) {
      if (std::none_of(shapes.begin(), shapes.end(),
                       [&](const auto& s) { return s.first == name; }))
        throw ValueError(fmt::format("write_hf_moe: tensor {} is not one of this {} model's",
                                     quote(name), spec.base.family));
    }
  }
  const std::string config = spec.to_json();
  // The tensors live on the first device (process 0's); save_arrays is collective.
  const DeviceMesh first({1}, {"file"}, std::vector<std::string>{list_devices().front()});
  std::vector<Array> arrays;
  arrays.reserve(shapes.size());
  std::vector<NamedArray> named;
  std::exception_ptr error;
  std::error_code made;
  fs::create_directories(dir, made);
  if (made) {
    error = std::make_exception_ptr(
        Error(fmt::format("write_hf_moe: creating {} failed: {}", quote(dir), made.message())));
  }
  Communicator& comm = default_runtime()->comm();
  agree_on_failure(comm, error);
  for (const auto& [name, shape] : shapes) {
    arrays.push_back(distribute_tensor(
        tensors.at(name), TensorLayout::replicated(static_cast<int>(shape.size()), first)));
    named.push_back(NamedArray{name, &arrays.back()});
  }
  save_arrays((fs::path(dir) / "model.safetensors").string(), named,
              {.metadata = {{"format", "pt"}}});
  if (comm.rank() == 0) {
    try {
      write_text_atomically(fs::path(dir) / "config.json", config);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_failure(comm, error);
}

}  // namespace meshlayout
