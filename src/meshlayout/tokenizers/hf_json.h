// hf_json.h — reading the fields of a Hugging Face tokenizer.json with errors that name the
// JSON path (`pre_tokenizer.pretokenizers[1].type`), the value found and what was expected.
// Header-only helpers for the hf_* files.
//
// Example:
//   bool prefix = hf_bool(j, "add_prefix_space", "pre_tokenizer", false);
//   std::string type = hf_type(j, "decoder");   // ValueError when "type" is missing
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"

namespace meshlayout::tokenizers {

inline std::string hf_path(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

inline std::string hf_path(std::string_view path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

/// `obj` must be an object; returns obj[key], ValueError naming the path when missing.
inline const nlohmann::json& hf_field(const nlohmann::json& obj, std::string_view key,
                                      std::string_view path) {
  if (!obj.is_object()) {
    throw ValueError(
        fmt::format("tokenizer.json: {} is {}; expected an object", path, json_excerpt(obj)));
  }
  auto it = obj.find(key);
  if (it == obj.end()) {
    throw ValueError(fmt::format("tokenizer.json: {} has no field \"{}\"", path, key));
  }
  return *it;
}

inline std::string hf_string(const nlohmann::json& obj, std::string_view key,
                             std::string_view path) {
  const nlohmann::json& v = hf_field(obj, key, path);
  if (!v.is_string()) {
    throw ValueError(fmt::format("tokenizer.json: {} is {}; expected a string", hf_path(path, key),
                                 json_excerpt(v)));
  }
  return v.get<std::string>();
}

/// obj[key], which must be a list (ValueError naming the path and the value otherwise).
inline const nlohmann::json& hf_list(const nlohmann::json& obj, std::string_view key,
                                     std::string_view path) {
  const nlohmann::json& a = hf_field(obj, key, path);
  if (!a.is_array()) {
    throw ValueError(fmt::format("tokenizer.json: {} is {}; expected a list", hf_path(path, key),
                                 json_excerpt(a)));
  }
  return a;
}

/// obj[key] as a bool; `fallback` when the field is missing or null.
inline bool hf_bool(const nlohmann::json& obj, std::string_view key, std::string_view path,
                    bool fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    throw ValueError(fmt::format("tokenizer.json: {} is {}; expected true or false",
                                 hf_path(path, key), json_excerpt(*it)));
  }
  return it->get<bool>();
}

/// obj[key] as a whole number in [lo, hi]; `fallback` when missing or null.
inline int64_t hf_int(const nlohmann::json& obj, std::string_view key, std::string_view path,
                      int64_t fallback, int64_t lo, int64_t hi) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    throw ValueError(fmt::format("tokenizer.json: {} is {}; expected a whole number from {} to {}",
                                 hf_path(path, key), json_excerpt(*it), lo, hi));
  }
  return it->get<int64_t>();
}

/// The "type" of the component at `path`.
inline std::string hf_type(const nlohmann::json& obj, std::string_view path) {
  return hf_string(obj, "type", path);
}

[[noreturn]] inline void hf_unsupported(std::string_view kind, std::string_view type,
                                        std::string_view path, std::string_view supported) {
  throw ValueError(
      fmt::format("tokenizer.json: {} type \"{}\" at {}.type is not supported; meshlayout reads {}",
                  kind, type, path, supported));
}

}  // namespace meshlayout::tokenizers
