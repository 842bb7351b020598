// hf_llama_test_util.h — (test-only) tiny Llama configs, the keras-hub layout rules and other
// layout schemes, random keras-hub weights, and HF checkpoints written by hand (with
// save_arrays, independently of save_hf_llama), for the HF checkpoint tests.
//
// Example:
//   LlamaConfig c = tiny_config(/*heads=*/4, /*kv_heads=*/2, /*tied=*/false);
//   TensorLayout l = scheme_layout(Scheme::kKerasHub, "token_embedding/embeddings", 2, mesh);
//   write_hf_by_hand(dir, c, formula_tensors(c));
#pragma once

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/init/float_convert.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/models/hf_llama_checkpoint.h"

namespace meshlayout::testing {

/// d = 4·heads (head_dim 4), ff = 24, an odd vocabulary of 37, two layers.
inline LlamaConfig tiny_config(int64_t heads, int64_t kv_heads, bool tied) {
  return LlamaConfig{.vocab_size = 37,
                     .hidden_size = 4 * heads,
                     .intermediate_size = 24,
                     .num_hidden_layers = 2,
                     .num_attention_heads = heads,
                     .num_key_value_heads = kv_heads,
                     .head_dim = 4,
                     .tie_word_embeddings = tied};
}

enum class Scheme {
  kKerasHub,    // LlamaBackbone.get_layout_map on (batch, model)
  kReplicated,  // every dim None
  kSwapped,     // the keras-hub rules with the axes swapped (heads on the model axis)
  kLastDim,     // the last dim over every mesh axis, major first (empty blocks on small dims)
  kFirstDim,    // the first dim over every mesh axis
};

inline const char* scheme_name(Scheme s) {
  switch (s) {
    case Scheme::kKerasHub:
      return "keras-hub";
    case Scheme::kReplicated:
      return "replicated";
    case Scheme::kSwapped:
      return "swapped";
    case Scheme::kLastDim:
      return "last-dim";
    default:
      return "first-dim";
  }
}

/// The layout of variable `path` (of `rank` dims) under `scheme`, on `mesh` (axes batch and
/// model for kKerasHub / kSwapped; any axes for the others).
inline TensorLayout scheme_layout(Scheme scheme, const std::string& path, size_t rank,
                                  const DeviceMesh& mesh) {
  std::vector<DimSharding> dims(rank, None);
  const auto has = [&](const char* part) { return path.find(part) != std::string::npos; };
  if (scheme == Scheme::kKerasHub || scheme == Scheme::kSwapped) {
    const std::string m = scheme == Scheme::kKerasHub ? "model" : "batch";
    const std::string b = scheme == Scheme::kKerasHub ? "batch" : "model";
    if (has("token_embedding/embeddings")) dims = {m, b};
    if (has("query/kernel") || has("key/kernel") || has("value/kernel")) dims = {m, b, None};
    if (has("attention_output/kernel")) dims = {m, None, b};
    if (has("feedforward_gate_dense") || has("feedforward_intermediate_dense")) dims = {b, m};
    if (has("feedforward_output_dense")) dims = {m, b};
  } else if (scheme == Scheme::kLastDim || scheme == Scheme::kFirstDim) {
    const size_t dim = scheme == Scheme::kLastDim ? rank - 1 : 0;
    dims[dim] = DimSharding(mesh.axis_names());
  }
  return TensorLayout(dims, mesh);
}

/// Random keras-hub variables of `config` (F32), keyed by keras path.
inline std::map<std::string, HostTensor> random_keras_weights(const LlamaConfig& config,
                                                              uint64_t seed) {
  std::map<std::string, HostTensor> out;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
    out.emplace(m.keras_path, HostTensor::random(DType::kF32, m.keras_shape, seed++));
  }
  return out;
}

/// `x` rounded to `dtype` (F32, BF16, F16) and back to F32: what a file of that dtype holds.
inline HostTensor rounded_through(const HostTensor& x, DType dtype) {
  HostTensor out = x;
  float* v = out.data_as<float>();
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    if (dtype == DType::kBF16) v[i] = float_from_bf16(bf16_from_float(v[i]));
    if (dtype == DType::kF16) v[i] = float_from_f16(f16_from_float(v[i]));
  }
  return out;
}

/// Region `box` of the F32 tensor `whole`, as row-major bytes.
inline std::vector<std::byte> slice(const HostTensor& whole, const Box& box) {
  std::vector<std::byte> out(static_cast<size_t>(box.num_elements()) * 4);
  copy_box(whole.data(), Box{Shape(whole.shape().size(), 0), whole.shape()}, out.data(), box, box,
           4);
  return out;
}

/// HF tensors of `config` whose 2-D element (r, c) holds r*1000 + c and 1-D element c holds c.
inline std::map<std::string, HostTensor> formula_tensors(const LlamaConfig& config) {
  std::map<std::string, HostTensor> out;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
    HostTensor t(DType::kF32, m.hf_shape);
    float* v = t.data_as<float>();
    const int64_t cols = m.hf_shape.back();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      v[i] = m.hf_shape.size() == 1 ? static_cast<float>(i)
                                    : static_cast<float>((i / cols) * 1000 + i % cols);
    }
    out.emplace(m.hf_name, std::move(t));
  }
  return out;
}

/// Writes `tensors` (HF names) as `dir`/model.safetensors with save_arrays, and config.json
/// (`config_json`, or config.to_json() when empty).
inline void write_hf_by_hand(const std::filesystem::path& dir, const LlamaConfig& config,
                             const std::map<std::string, HostTensor>& tensors,
                             const std::string& config_json = "") {
  std::filesystem::create_directories(dir);
  auto rt = Runtime::single_process(1);
  DeviceMesh mesh({1}, {"x"}, std::vector<std::string>{"cpu:0"});
  std::vector<Array> arrays;
  arrays.reserve(tensors.size());
  std::vector<NamedArray> named;
  for (const auto& [name, t] : tensors) {
    TensorLayout replicated(std::vector<DimSharding>(t.shape().size(), None), mesh);
    arrays.push_back(distribute_tensor(t, replicated, {.runtime = rt}));
    named.push_back({name, &arrays.back()});
  }
  save_arrays((dir / "model.safetensors").string(), named);
  std::ofstream(dir / "config.json") << (config_json.empty() ? config.to_json() : config_json);
}

}  // namespace meshlayout::testing
