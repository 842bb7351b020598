#include "meshlayout/models/hf_llama_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

using nlohmann::json;

// Reads the fields of one config.json object, naming the file and field in every message.
class FieldReader {
 public:
  FieldReader(const json& object, std::string source) : j_(object), source_(std::move(source)) {}

  // The value of `field`, or nullptr when it is absent or null (JSON null means "default").
  const json* find(std::string_view field) const {
    auto it = j_.find(field);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  [[noreturn]] void fail(std::string_view field, const json& value,
                         std::string_view expected) const {
    throw ValueError(fmt::format("{}: {} is {}, expected {}", source_, quote(field),
                                 json_excerpt(value), expected));
  }

  // A positive integer; `fallback` when absent (std::nullopt: the field is required).
  int64_t positive_int(std::string_view field, std::optional<int64_t> fallback) const {
    const json* v = find(field);
    if (v == nullptr) {
      if (fallback) return *fallback;
      throw ValueError(
          fmt::format("{} has no {}, a required field of a decoder config", source_, quote(field)));
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > 0 &&
        v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
      return static_cast<int64_t>(v->get<uint64_t>());
    }
    if (v->is_number_integer() && v->get<int64_t>() > 0) return v->get<int64_t>();
    fail(field, *v, "a positive integer");
  }

  double non_negative_number(std::string_view field, double fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->get<double>() >= 0) || !std::isfinite(v->get<double>())) {
      fail(field, *v, "a number >= 0");
    }
    return v->get<double>();
  }

  double positive_number(std::string_view field, double fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_number()) fail(field, *v, "a positive number");
    const double d = v->get<double>();
    if (!(d > 0) || !std::isfinite(d)) fail(field, *v, "a positive number");
    return d;
  }

  bool boolean(std::string_view field, bool fallback) const {
    const json* v = find(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(field, *v, "true or false");
    return v->get<bool>();
  }

  std::string string(std::string_view field, std::string_view fallback) const {
    const json* v = find(field);
    if (v == nullptr) return std::string(fallback);
    if (!v->is_string()) fail(field, *v, "a string");
    return v->get<std::string>();
  }

 private:
  const json& j_;
  std::string source_;
};

// The scaling type of a rope_scaling / rope_parameters object ("rope_type", or the older
// "type"); "default" when it names none.
std::string rope_type_of(const FieldReader& outer, std::string_view field, const json& rope) {
  if (!rope.is_object()) outer.fail(field, rope, "an object or null");
  const FieldReader r(rope, "");
  for (std::string_view key : {"rope_type", "type"}) {
    if (const json* t = r.find(key)) {
      if (!t->is_string()) outer.fail(fmt::format("{}.{}", field, key), *t, "a string");
      return t->get<std::string>();
    }
  }
  return "default";
}

// The Hugging Face class of each family, in kLlamaFamilies' order.
constexpr std::string_view kArchitectures[] = {
    "LlamaForCausalLM",    "MistralForCausalLM", "Qwen2ForCausalLM",  "Qwen3ForCausalLM",
    "GemmaForCausalLM",    "Gemma2ForCausalLM",  "Gemma3ForCausalLM", "MixtralForCausalLM",
    "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"};

std::string supported_families() {
  std::string out;
  for (size_t i = 0; i < std::size(kArchitectures); ++i) {
    out +=
        fmt::format("{}{} (model_type '{}')", i ? ", " : "", kArchitectures[i], kLlamaFamilies[i]);
  }
  return out;
}

// Llama 3's rope_scaling from a rope_scaling / rope_parameters object of type "llama3"; no
// scaling for "default"; ValueError for every other type, or a llama3 object lacking a field.
std::optional<Llama3RopeScaling> read_rope_scaling(std::string_view source, std::string_view field,
                                                   const std::string& type, const json& rope) {
  if (type == "default" || type == "none") return std::nullopt;
  if (type != "llama3") {
    throw ValueError(fmt::format(
        "{}: {} has rope type {}, which is not supported: meshlayout supports plain RoPE "
        "(rope_type 'default' or no rope_scaling) and Llama 3's 'llama3' scaling",
        source, quote(field), quote(type)));
  }
  const FieldReader r(rope, fmt::format("{}: {}", source, field));
  Llama3RopeScaling s;
  for (std::string_view required :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (r.find(required) == nullptr) {
      throw ValueError(fmt::format("{}: {} of type 'llama3' has no {}, which that type needs",
                                   source, quote(field), quote(required)));
    }
  }
  s.factor = r.positive_number("factor", s.factor);
  s.low_freq_factor = r.positive_number("low_freq_factor", s.low_freq_factor);
  s.high_freq_factor = r.positive_number("high_freq_factor", s.high_freq_factor);
  s.original_max_position_embeddings =
      r.positive_int("original_max_position_embeddings", s.original_max_position_embeddings);
  return s;
}

// The mixture of experts' fields (transformers' MixtralConfig / Qwen3MoeConfig / Qwen2MoeConfig
// defaults).
void read_experts(const FieldReader& f, const std::string& model_type, LlamaConfig& c) {
  const bool mixtral = model_type == "mixtral", qwen2 = model_type == "qwen2_moe";
  c.num_experts = f.positive_int(mixtral ? "num_local_experts" : "num_experts", mixtral ? 8
                                                                                : qwen2 ? 60
                                                                                        : 128);
  c.num_experts_per_tok = f.positive_int("num_experts_per_tok", mixtral ? 2 : qwen2 ? 4 : 8);
  c.norm_topk_prob = mixtral || f.boolean("norm_topk_prob", false);
  c.router_aux_loss_coef = f.non_negative_number("router_aux_loss_coef", 0.001);
  c.output_router_logits = f.boolean("output_router_logits", false);
  if (mixtral) {
    if (f.non_negative_number("router_jitter_noise", 0.0) != 0.0) {
      f.fail("router_jitter_noise", *f.find("router_jitter_noise"),
             "0 (meshlayout's router adds no training noise)");
    }
    return;
  }
  c.moe_intermediate_size = f.positive_int("moe_intermediate_size", qwen2 ? 1408 : 768);
  if (qwen2) {
    c.shared_expert_intermediate_size = f.positive_int("shared_expert_intermediate_size", 5632);
  }
  c.decoder_sparse_step = f.positive_int("decoder_sparse_step", 1);
  if (const json* only = f.find("mlp_only_layers")) {
    if (!only->is_array()) f.fail("mlp_only_layers", *only, "a list of layer indices");
    for (const json& i : *only) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 ||
          i.get<int64_t>() >= c.num_hidden_layers) {
        f.fail("mlp_only_layers", *only,
               fmt::format("a list of layer indices in [0, {})", c.num_hidden_layers));
      }
      c.mlp_only_layers.push_back(i.get<int64_t>());
    }
  }
}

}  // namespace

LlamaConfig LlamaConfig::from_json(std::string_view text, std::string_view source) {
  json j;
  try {
    j = parse_json_checked(text);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", source, e.what()));
  }
  if (!j.is_object()) {
    throw ValueError(fmt::format("{} holds {}, expected a JSON object of config fields", source,
                                 json_excerpt(j)));
  }
  const FieldReader f(j, std::string(source));

  // The family: model_type, which `architectures` (when present) must agree with.
  const std::string model_type = f.string("model_type", "llama");
  const auto family_index = [&]() -> size_t {
    for (size_t i = 0; i < std::size(kLlamaFamilies); ++i) {
      if (kLlamaFamilies[i] == model_type) return i;
    }
    throw ValueError(fmt::format("{}: unsupported model_type {}, expected one of {}", source,
                                 quote(model_type), supported_families()));
  }();
  if (const json* arch = f.find("architectures")) {
    if (!arch->is_array()) f.fail("architectures", *arch, "a list of class names");
    const bool found = std::any_of(arch->begin(), arch->end(), [&](const json& a) {
      return a.is_string() && a.get<std::string>() == kArchitectures[family_index];
    });
    if (!found) {
      throw ValueError(fmt::format(
          "{}: unsupported architecture {} (architectures) for model_type {}, expected {}; "
          "meshlayout reads {}",
          source, json_excerpt(*arch), quote(model_type), kArchitectures[family_index],
          supported_families()));
    }
  }
  const bool gemma = model_type == "gemma" || model_type == "gemma2" || model_type == "gemma3_text";
  const bool gemma3 = model_type == "gemma3_text";
  if (gemma) {  // GeGLU: gelu with the tanh approximation (Gemma 1 files may say "gelu")
    const std::string act =
        f.string("hidden_activation", f.string("hidden_act", "gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh" && act != "gelu") {
      throw ValueError(fmt::format(
          "{}: hidden_activation {} is not supported for {}, expected 'gelu_pytorch_tanh'", source,
          quote(act), quote(model_type)));
    }
  } else {
    const std::string act = f.string("hidden_act", "silu");
    if (act != "silu") {
      throw ValueError(
          fmt::format("{}: hidden_act {} is not supported, expected 'silu'", source, quote(act)));
    }
  }
  if (f.boolean("mlp_bias", false)) {
    throw ValueError(
        fmt::format("{}: 'mlp_bias' is true, which is not supported (keras-hub's gated "
                    "feed-forward has no biases), expected false",
                    source));
  }
  const bool qwen = model_type == "qwen2" || model_type == "qwen3" || model_type == "qwen3_moe" ||
                    model_type == "qwen2_moe";

  LlamaConfig c;
  c.vocab_size = f.positive_int("vocab_size", std::nullopt);
  c.hidden_size = f.positive_int("hidden_size", std::nullopt);
  c.intermediate_size = f.positive_int("intermediate_size", std::nullopt);
  c.num_hidden_layers = f.positive_int("num_hidden_layers", std::nullopt);
  c.num_attention_heads = f.positive_int("num_attention_heads", std::nullopt);
  c.num_key_value_heads = f.positive_int("num_key_value_heads", c.num_attention_heads);
  // transformers' defaults: Qwen3Config's head_dim is 128, the others derive it.
  c.head_dim = f.positive_int("head_dim", model_type == "qwen3" || model_type == "qwen3_moe" ? 128
                                          : gemma                                            ? 256
                                                  : c.hidden_size / c.num_attention_heads);
  c.rms_norm_eps = f.positive_number("rms_norm_eps", model_type == "mixtral" ? 1e-5 : 1e-6);
  c.family = model_type;
  c.rope_theta = f.positive_number("rope_theta", gemma3 || model_type == "mixtral" ? 1e6 : 10000.0);
  const json* linear = f.find("rope_scaling");
  if (gemma3 && linear != nullptr && rope_type_of(f, "rope_scaling", *linear) == "linear") {
    // Gemma 3's global layers: positions stretched by the factor.
    c.rope_linear_factor = FieldReader(*linear, fmt::format("{}: rope_scaling", source))
                               .positive_number("factor", 1.0);
  } else if (const json* scaling = f.find("rope_scaling")) {
    c.rope_scaling = read_rope_scaling(source, "rope_scaling",
                                       rope_type_of(f, "rope_scaling", *scaling), *scaling);
  }
  if (const json* rope = f.find("rope_parameters")) {  // transformers v5 keeps rope_theta here
    if (auto s = read_rope_scaling(source, "rope_parameters",
                                   rope_type_of(f, "rope_parameters", *rope), *rope)) {
      c.rope_scaling = s;
    }
    const FieldReader r(*rope, fmt::format("{}: rope_parameters", source));
    c.rope_theta = r.positive_number("rope_theta", c.rope_theta);
  }
  // Qwen 2 (and its MoE) has q/k/v biases by construction (no attention_bias field).
  if (model_type != "qwen2" && model_type != "qwen2_moe")
    c.attention_bias = f.boolean("attention_bias", false);
  if (model_type == "mistral" || model_type == "gemma2" || gemma3) {  // 4096 absent, null none
    c.sliding_window =
        j.contains("sliding_window") ? f.positive_int("sliding_window", 0) : int64_t{4096};
  }
  if (model_type == "mixtral") c.sliding_window = f.positive_int("sliding_window", 0);  // null
  if (qwen && f.boolean("use_sliding_window", false)) {  // transformers' Qwen2Config defaults
    c.sliding_window = f.positive_int("sliding_window", 4096);
    c.max_window_layers = f.positive_int("max_window_layers", 28);
  }
  if (model_type == "mixtral" || model_type == "qwen3_moe" || model_type == "qwen2_moe") {
    read_experts(f, model_type, c);
  }
  if (gemma) {
    c.query_pre_attn_scalar = f.positive_number(
        "query_pre_attn_scalar", model_type == "gemma" ? static_cast<double>(c.head_dim) : 256.0);
  }
  if (gemma3) {  // transformers' Gemma3TextConfig: local rope 10000, one global layer in six
    c.rope_local_base_freq = f.positive_number("rope_local_base_freq", 10000.0);
    c.sliding_window_pattern = f.positive_int("sliding_window_pattern", 6);
    c.attn_logit_softcapping = f.positive_number("attn_logit_softcapping", 0.0);
    c.final_logit_softcapping = f.positive_number("final_logit_softcapping", 0.0);
    if (const json* types = f.find("layer_types")) {  // must be that pattern
      bool pattern =
          types->is_array() && static_cast<int64_t>(types->size()) == c.num_hidden_layers;
      for (size_t i = 0; pattern && i < types->size(); ++i) {
        pattern = (*types)[i] == (c.sliding_layer(static_cast<int64_t>(i)) ? "sliding_attention"
                                                                           : "full_attention");
      }
      if (!pattern) {
        f.fail("layer_types", *types,
               fmt::format("Gemma 3's pattern (full_attention on every {}-th layer, "
                           "sliding_attention on the others)",
                           c.sliding_window_pattern));
      }
    }
  }
  if (model_type == "gemma2") {  // transformers' Gemma2Config defaults; null: no capping
    const auto cap = [&](std::string_view field, double fallback) {
      return j.contains(field) ? f.positive_number(field, 0.0) : fallback;
    };
    c.attn_logit_softcapping = cap("attn_logit_softcapping", 50.0);
    c.final_logit_softcapping = cap("final_logit_softcapping", 30.0);
    if (const json* types = f.find("layer_types")) {  // must be the alternating pattern
      bool alternating =
          types->is_array() && static_cast<int64_t>(types->size()) == c.num_hidden_layers;
      for (size_t i = 0; alternating && i < types->size(); ++i) {
        alternating = (*types)[i] == (i % 2 == 0 ? "sliding_attention" : "full_attention");
      }
      if (!alternating) {
        f.fail("layer_types", *types,
               "the alternating pattern of Gemma 2 (sliding_attention on layers 0, 2, ..., "
               "full_attention on 1, 3, ...)");
      }
    }
  }
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", gemma);  // Gemma's default: tied
  c.max_position_embeddings =
      f.positive_int("max_position_embeddings", model_type == "llama"     ? 2048
                                                : model_type == "mistral" ? 4096 * 32
                                                : gemma                   ? 8192
                                                                          : 32768);
  c.torch_dtype = f.string("torch_dtype", f.string("dtype", ""));
  try {
    c.validate();
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", source, e.what()));
  }
  return c;
}

LlamaConfig LlamaConfig::from_file(const std::string& path) {
  return from_json(read_regular_file(path, kMaxJsonFileBytes, "Llama config file"), quote(path));
}

void LlamaConfig::validate() const {
  const std::pair<std::string_view, int64_t> sizes[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings}};
  for (const auto& [field, value] : sizes) {
    if (value <= 0) {
      throw ValueError(fmt::format("{} is {}, expected a positive integer", quote(field), value));
    }
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    throw ValueError(fmt::format(
        "'num_attention_heads' ({}) is not a multiple of 'num_key_value_heads' ({}): each KV "
        "head must serve the same number of query heads",
        num_attention_heads, num_key_value_heads));
  }
  if (std::find(std::begin(kLlamaFamilies), std::end(kLlamaFamilies), family) ==
      std::end(kLlamaFamilies)) {
    throw ValueError(
        fmt::format("'model_type' is {}, expected one of {}", quote(family), supported_families()));
  }
  const bool windowed = family == "mistral" || family == "gemma2" || family == "gemma3_text" ||
                        family == "mixtral" || qwen();
  const bool experts = family == "mixtral" || family == "qwen3_moe" || family == "qwen2_moe";
  if (experts != moe()) {
    throw ValueError(fmt::format("'num_experts' is {}, expected {} for model_type {}", num_experts,
                                 experts ? "a positive number" : "0", quote(family)));
  }
  if (moe() && (num_experts_per_tok < 1 || num_experts_per_tok > num_experts)) {
    throw ValueError(fmt::format("'num_experts_per_tok' is {}, expected 1 to {} (the experts)",
                                 num_experts_per_tok, num_experts));
  }
  if (moe() && (expert_intermediate_size() <= 0 || decoder_sparse_step < 1 ||
                !(router_aux_loss_coef >= 0))) {
    throw ValueError(fmt::format(
        "the experts' 'moe_intermediate_size' ({}) and 'decoder_sparse_step' ({}) must be "
        "positive and 'router_aux_loss_coef' ({}) at least 0",
        expert_intermediate_size(), decoder_sparse_step, router_aux_loss_coef));
  }
  if ((family == "qwen2_moe") != (shared_expert_intermediate_size > 0) ||
      shared_expert_intermediate_size < 0) {
    throw ValueError(
        fmt::format("'shared_expert_intermediate_size' is {}, expected {} for "
                    "model_type {}",
                    shared_expert_intermediate_size,
                    family == "qwen2_moe" ? "a positive number" : "0", quote(family)));
  }
  if (family == "gemma3_text" && (sliding_window_pattern < 1 || !(rope_local_base_freq > 0))) {
    throw ValueError(fmt::format(
        "'sliding_window_pattern' is {} and 'rope_local_base_freq' {}, expected positive numbers",
        sliding_window_pattern, rope_local_base_freq));
  }
  Rope(rope_theta, rope_scaling).validate();
  if (rope_linear_factor != 1.0 && rope_scaling) {
    throw ValueError(
        fmt::format("a linear rope_scaling (factor {}) and a llama3 one cannot both apply",
                    rope_linear_factor));
  }
  if (!(rope_linear_factor > 0) || !std::isfinite(rope_linear_factor)) {
    throw ValueError(fmt::format("the linear rope_scaling factor is {}, expected a positive number",
                                 rope_linear_factor));
  }
  if (sliding_window < 0 || (sliding_window > 0 && !windowed)) {
    throw ValueError(fmt::format(
        "'sliding_window' is {}, expected 0 (none){}", sliding_window,
        windowed ? " or a positive number of keys" : " for model_type " + quote(family)));
  }
  if (gemma() && !(query_pre_attn_scalar > 0)) {
    throw ValueError(fmt::format("'query_pre_attn_scalar' is {}, expected a positive number",
                                 query_pre_attn_scalar));
  }
  for (const auto& [field, cap] : {std::pair{"attn_logit_softcapping", attn_logit_softcapping},
                                   std::pair{"final_logit_softcapping", final_logit_softcapping}}) {
    const bool capped = family == "gemma2" || family == "gemma3_text";
    if (!(cap >= 0) || !std::isfinite(cap) || (cap > 0 && !capped)) {
      throw ValueError(fmt::format("{} is {}, expected {}", quote(field), cap,
                                   capped ? std::string("a positive number, or 0 for none")
                                          : "0 for model_type " + quote(family)));
    }
  }

  if (head_dim % 2 != 0) {
    throw ValueError(
        fmt::format("'head_dim' is {}, expected an even number (the rotary embedding rotates "
                    "pairs)",
                    head_dim));
  }
  Rope(rope_theta, rope_scaling).validate();
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) {
    throw ValueError(fmt::format("'rms_norm_eps' is {}, expected a positive number", rms_norm_eps));
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    throw ValueError(fmt::format("'rope_theta' is {}, expected a positive number", rope_theta));
  }
}

Rope LlamaConfig::rope_of_layer(int64_t i) const {
  if (family == "gemma3_text" && sliding_layer(i)) return Rope(rope_local_base_freq);
  Rope rope(rope_theta, rope_scaling);
  rope.linear_factor = rope_linear_factor;
  return rope;
}

double LlamaConfig::attention_scale() const {
  return gemma() ? 1.0 / std::sqrt(query_pre_attn_scalar) : 0.0;
}

std::string LlamaConfig::sparse_block_name(int64_t i) const {
  int64_t before = 0;
  for (int64_t j = 0; j < i; ++j) before += sparse_layer(j) ? 1 : 0;
  const char* base = family == "mixtral"     ? "mixtral_sparse_moe_block"
                     : family == "qwen2_moe" ? "qwen_sparse_moe_block"
                                             : "qwen3_sparse_moe_block";
  return before > 0 ? fmt::format("{}_{}", base, before) : std::string(base);
}

std::string LlamaConfig::architecture() const {
  for (size_t i = 0; i < std::size(kLlamaFamilies); ++i) {
    if (kLlamaFamilies[i] == family) return std::string(kArchitectures[i]);
  }
  throw ValueError(
      fmt::format("'model_type' is {}, expected one of {}", quote(family), supported_families()));
}

}  // namespace meshlayout
