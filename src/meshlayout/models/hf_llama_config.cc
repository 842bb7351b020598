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
      throw ValueError(fmt::format("{} has no {}, a required field of a LlamaForCausalLM config",
                                   source_, quote(field)));
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > 0 &&
        v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
      return static_cast<int64_t>(v->get<uint64_t>());
    }
    if (v->is_number_integer() && v->get<int64_t>() > 0) return v->get<int64_t>();
    fail(field, *v, "a positive integer");
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

void refuse_rope_scaling(std::string_view source, std::string_view field, const std::string& type) {
  if (type == "default" || type == "none") return;
  throw ValueError(fmt::format(
      "{}: {} has rope type {}, which is not supported: meshlayout's Llama uses plain RoPE "
      "(rope_scaling null, or rope_type 'default')",
      source, quote(field), quote(type)));
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

  if (const json* arch = f.find("architectures")) {
    if (!arch->is_array()) f.fail("architectures", *arch, "a list of class names");
    const bool llama = std::any_of(arch->begin(), arch->end(), [](const json& a) {
      return a.is_string() && a.get<std::string>() == "LlamaForCausalLM";
    });
    if (!llama) {
      throw ValueError(
          fmt::format("{}: unsupported architecture {} (architectures), expected "
                      "LlamaForCausalLM",
                      source, json_excerpt(*arch)));
    }
  }
  const std::string model_type = f.string("model_type", "llama");
  if (model_type != "llama") {
    throw ValueError(
        fmt::format("{}: unsupported model_type {}, expected 'llama'", source, quote(model_type)));
  }
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") {
    throw ValueError(
        fmt::format("{}: hidden_act {} is not supported, expected 'silu'", source, quote(act)));
  }
  for (std::string_view bias : {"attention_bias", "mlp_bias"}) {
    if (f.boolean(bias, false)) {
      throw ValueError(
          fmt::format("{}: {} is true, which is not supported (keras-hub's Llama "
                      "has no biases), expected false",
                      source, quote(bias)));
    }
  }
  if (const json* scaling = f.find("rope_scaling")) {
    refuse_rope_scaling(source, "rope_scaling", rope_type_of(f, "rope_scaling", *scaling));
  }

  LlamaConfig c;
  c.vocab_size = f.positive_int("vocab_size", std::nullopt);
  c.hidden_size = f.positive_int("hidden_size", std::nullopt);
  c.intermediate_size = f.positive_int("intermediate_size", std::nullopt);
  c.num_hidden_layers = f.positive_int("num_hidden_layers", std::nullopt);
  c.num_attention_heads = f.positive_int("num_attention_heads", std::nullopt);
  c.num_key_value_heads = f.positive_int("num_key_value_heads", c.num_attention_heads);
  c.head_dim = f.positive_int("head_dim", c.hidden_size / c.num_attention_heads);
  c.rms_norm_eps = f.positive_number("rms_norm_eps", 1e-6);
  c.rope_theta = f.positive_number("rope_theta", 10000.0);
  if (const json* rope = f.find("rope_parameters")) {  // transformers v5 keeps rope_theta here
    refuse_rope_scaling(source, "rope_parameters", rope_type_of(f, "rope_parameters", *rope));
    const FieldReader r(*rope, fmt::format("{}: rope_parameters", source));
    c.rope_theta = r.positive_number("rope_theta", c.rope_theta);
  }
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.max_position_embeddings = f.positive_int("max_position_embeddings", 2048);
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
  if (hidden_size % num_attention_heads != 0) {
    throw ValueError(
        fmt::format("'hidden_size' ({}) is not a multiple of "
                    "'num_attention_heads' ({})",
                    hidden_size, num_attention_heads));
  }
  if (head_dim != hidden_size / num_attention_heads) {
    throw ValueError(fmt::format(
        "'head_dim' is {}, expected hidden_size / num_attention_heads = {} / {} = {}: keras-hub "
        "derives head_dim = hidden_size / num_attention_heads",
        head_dim, hidden_size, num_attention_heads, hidden_size / num_attention_heads));
  }
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) {
    throw ValueError(fmt::format("'rms_norm_eps' is {}, expected a positive number", rms_norm_eps));
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    throw ValueError(fmt::format("'rope_theta' is {}, expected a positive number", rope_theta));
  }
}

std::string LlamaConfig::to_json() const {
  validate();
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["max_position_embeddings"] = max_position_embeddings;
  if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace meshlayout
