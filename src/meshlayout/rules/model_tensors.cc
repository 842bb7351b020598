#include "meshlayout/rules/model_tensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/models/hf_llama_checkpoint.h"

namespace meshlayout {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

// The config fields of each view dimension, from a mapping's hf_shape_fields
// ("(num_attention_heads*head_dim, hidden_size) = (4*8, 32)"): one per view dimension, with
// the HF dimension each belongs to; empty when the text does not give one field per view
// dimension after the first `skip` (a stacked slice's leading 1).
std::vector<std::pair<std::string, int>> view_fields(const HfWeightMapping& m, size_t skip) {
  std::string_view text = m.hf_shape_fields;
  text = text.substr(0, text.find(" = "));
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return {};
  text = text.substr(1, text.size() - 2);
  std::vector<std::pair<std::string, int>> out;
  int hf_dim = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string part = trim(text.substr(start, comma - start));
    if (!part.empty()) {
      for (size_t s = 0; s <= part.size();) {
        size_t star = part.find('*', s);
        if (star == std::string::npos) star = part.size();
        out.emplace_back(trim(std::string_view(part).substr(s, star - s)), hf_dim);
        s = star + 1;
      }
      ++hf_dim;
    }
    start = comma + 1;
  }
  if (out.size() + skip != m.view_shape.size() || hf_dim != static_cast<int>(m.hf_shape.size())) {
    return {};
  }
  return out;
}

}  // namespace

std::vector<ModelTensor> model_tensors(const LlamaConfig& config) {
  std::vector<ModelTensor> out;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
    // A stacked variable (a mixture's (E, d, F) expert kernels) once, whole: its first
    // dimension is the experts (one HF tensor each), the others its slices'.
    if (m.stack_index > 0) continue;
    const bool stacked = m.stack_index == 0;
    ModelTensor t{.path = m.keras_path,
                  .shape = m.variable_shape(),
                  .bytes = num_elements(m.variable_shape()) * 4,  // F32, as LlamaModel holds them
                  .hf_name = m.hf_name};
    std::vector<std::pair<std::string, int>> fields = view_fields(m, stacked ? 1 : 0);
    if (stacked && !fields.empty()) fields.insert(fields.begin(), {"num_experts", -1});
    // The first view dimension of each HF dimension is its major part.
    for (int view : m.perm) {
      const auto v = static_cast<size_t>(view);
      if (fields.empty()) {
        t.dims.emplace_back();
        t.hf_dims.push_back(-1);
        continue;
      }
      t.dims.push_back(fields[v].first);
      const bool major = v == 0 || fields[v - 1].second != fields[v].second;
      t.hf_dims.push_back(major ? fields[v].second : -1);
    }
    out.push_back(std::move(t));
  }
  return out;
}

ModelTensors load_model_tensors(const std::string& path, const std::optional<std::string>& family) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string config_path = (fs::path(path) / "config.json").string();
  if (fs::is_directory(path, ec) && fs::exists(config_path, ec)) {
    std::string text = read_regular_file(config_path, kMaxJsonFileBytes, "config.json");
    if (family) {
      if (std::find(std::begin(kLlamaFamilies), std::end(kLlamaFamilies), *family) ==
          std::end(kLlamaFamilies)) {
        throw ValueError(fmt::format("unknown model family {}; expected one of {}", quote(*family),
                                     fmt::join(kLlamaFamilies, ", ")));
      }
      // The model under the family's name: model_type and the class it implies.
      nlohmann::json j = parse_json_checked(text);
      if (!j.is_object())
        throw ValueError(fmt::format("{}: not a JSON object", quote(config_path)));
      LlamaConfig named;
      named.family = *family;
      j["model_type"] = *family;
      if (j.contains("architectures")) j["architectures"] = {named.architecture()};
      text = j.dump();
    }
    ModelTensors out{.config = LlamaConfig::from_json(text, config_path)};
    out.source = fmt::format("{} ({})", quote(path), out.config->family);
    out.tensors = model_tensors(*out.config);
    return out;
  }
  if (family) {
    throw ValueError(fmt::format(
        "--family {} names the family of a config.json, but {} has none (a weights-only model "
        "is read by its tensor names)",
        quote(*family), quote(path)));
  }
  const Checkpoint ckpt = Checkpoint::open(path);
  ModelTensors out{.source = fmt::format("{} (weights only)", quote(path))};
  for (const auto& [file, info] : ckpt.tensors()) {
    out.tensors.push_back(ModelTensor{.path = info->name,
                                      .shape = info->shape,
                                      .bytes = static_cast<int64_t>(info->num_bytes()),
                                      .dims = std::vector<std::string>(info->shape.size()),
                                      .hf_name = info->name,
                                      .hf_dims = std::vector<int>(info->shape.size(), -1)});
  }
  return out;
}

std::string layer_glob(const std::string& path) {
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find_first_of("/.", start);
    if (end == std::string::npos) end = path.size();
    const std::string_view part = std::string_view(path).substr(start, end - start);
    size_t digits = part.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(part[digits - 1]))) --digits;
    if (digits < part.size() && (digits == 0 || part[digits - 1] == '_')) {
      return path.substr(0, start + digits) + "*" + path.substr(end);
    }
    start = end + 1;
  }
  return path;
}

}  // namespace meshlayout
