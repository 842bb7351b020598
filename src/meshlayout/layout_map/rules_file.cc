#include "meshlayout/layout_map/rules_file.h"

#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using nlohmann::json;

std::string type_name(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  return "an object";
}

// Without recursion (json_excerpt), though parse_json_checked already bounds the depth.
std::string excerpt(const json& j) { return json_excerpt(j); }

[[noreturn]] void fail(std::string_view source, std::string_view where, std::string_view what) {
  throw ValueError(fmt::format("rules file {}: {}: {}", quote(source), where, what));
}

DeviceMesh parse_mesh(const json& j, std::string_view source) {
  if (!j.is_object())
    fail(source, "\"mesh\"",
         "must be an object with \"shape\" and \"axis_names\", got " + type_name(j));
  for (const auto& [key, value] : j.items()) {
    if (key != "shape" && key != "axis_names" && key != "devices") {
      fail(source, "\"mesh\"",
           fmt::format("unknown key {}; expected \"shape\", \"axis_names\" and optionally "
                       "\"devices\"",
                       quote(key)));
    }
  }
  if (!j.contains("shape") || !j.contains("axis_names")) {
    fail(source, "\"mesh\"", "needs both \"shape\" and \"axis_names\"");
  }
  std::vector<int64_t> shape;
  const json& s = j["shape"];
  if (!s.is_array())
    fail(source, "\"mesh\".\"shape\"", "must be a list of integers, got " + type_name(s));
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s[i].is_number_integer() ||
        (s[i].is_number_unsigned() && s[i].get<uint64_t>() > uint64_t{INT64_MAX})) {
      fail(source, fmt::format("\"mesh\".\"shape\"[{}]", i),
           fmt::format("must be an integer of at most 64 bits, got {} {}", type_name(s[i]),
                       excerpt(s[i])));
    }
    shape.push_back(s[i].get<int64_t>());
  }
  auto strings = [&](const json& a, std::string_view name) {
    std::vector<std::string> out;
    if (!a.is_array()) {
      fail(source, fmt::format("\"mesh\".\"{}\"", name),
           "must be a list of strings, got " + type_name(a));
    }
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_string()) {
        fail(source, fmt::format("\"mesh\".\"{}\"[{}]", name, i),
             fmt::format("must be a string, got {} {}", type_name(a[i]), excerpt(a[i])));
      }
      out.push_back(a[i].get<std::string>());
    }
    return out;
  };
  std::vector<std::string> names = strings(j["axis_names"], "axis_names");
  std::optional<std::vector<std::string>> devices;
  if (j.contains("devices")) devices = strings(j["devices"], "devices");
  if (!devices) {
    // As in the text form, a mesh without devices means cpu:0 … cpu:N-1 (N = its size), so
    // a rules file describes the same mesh on every machine.
    int64_t total = 1;
    for (int64_t extent : shape) {
      if (extent < 1 || extent > kMaxMeshDevices || total * extent > kMaxMeshDevices) {
        total = 0;
        break;
      }
      total *= extent;
    }
    if (total > device_count()) {
      fail(source, "\"mesh\"",
           fmt::format("shape {} describes {} devices, but list_devices() has {}; set {} or "
                       "set_device_count(), or list \"devices\"",
                       repr_ints(shape), total, device_count(), kCpuDevicesEnvVar));
    }
    if (total > 0) {
      devices.emplace();
      for (int64_t i = 0; i < total; ++i) devices->push_back(fmt::format("cpu:{}", i));
    }
  }
  try {
    return DeviceMesh(shape, names, devices);
  } catch (const ValueError& e) {
    fail(source, "\"mesh\"", e.what());
  }
}

std::vector<DimSharding> parse_layout(const json& j, std::string_view source,
                                      const std::string& where) {
  if (!j.is_array()) {
    fail(source, where,
         fmt::format("the layout must be a list with one entry per tensor dimension (null, an "
                     "axis name or a list of axis names), got {} {}",
                     type_name(j), excerpt(j)));
  }
  std::vector<DimSharding> dims;
  for (size_t d = 0; d < j.size(); ++d) {
    const json& e = j[d];
    if (e.is_null()) {
      dims.emplace_back();
    } else if (e.is_string()) {
      dims.emplace_back(e.get<std::string>());
    } else if (e.is_array()) {
      std::vector<std::string> axes;
      for (size_t k = 0; k < e.size(); ++k) {
        if (!e[k].is_string()) {
          fail(source, fmt::format("{} layout entry {}", where, d),
               fmt::format("a list of axes must hold axis names, got {} {} at position {}",
                           type_name(e[k]), excerpt(e[k]), k));
        }
        axes.push_back(e[k].get<std::string>());
      }
      if (axes.empty()) {
        fail(source, fmt::format("{} layout entry {}", where, d),
             "an empty list of axes; write null for a dimension that is not split");
      }
      dims.emplace_back(std::move(axes));
    } else {
      fail(source, fmt::format("{} layout entry {}", where, d),
           fmt::format("must be null, an axis name or a list of axis names, got {} {}",
                       type_name(e), excerpt(e)));
    }
  }
  return dims;
}

}  // namespace

RulesFile parse_rules_json(std::string_view json_text, std::string_view source) {
  json root;
  try {
    // Depth-limited (64 levels; a rules file needs 4), duplicate keys refused at any level.
    root = parse_json_checked(json_text);
  } catch (const ValueError& e) {  // parse errors, numbers out of range (1e400), limits
    throw ValueError(fmt::format("rules file {}: {}", quote(source), e.what()));
  }
  if (!root.is_object()) {
    fail(source, "top level", "must be an object with a \"rules\" list, got " + type_name(root));
  }
  RulesFile file;
  for (const auto& [key, value] : root.items()) {
    if (key != "mesh" && key != "mode" && key != "rules") {
      fail(source, "top level",
           fmt::format("unknown key {}; expected \"rules\" and optionally \"mesh\" and \"mode\"",
                       quote(key)));
    }
  }
  if (root.contains("mesh") && !root["mesh"].is_null())
    file.mesh = parse_mesh(root["mesh"], source);
  if (root.contains("mode")) {
    if (!root["mode"].is_string())
      fail(source, "\"mode\"", "must be a string, got " + type_name(root["mode"]));
    try {
      file.mode = parse_match_mode(root["mode"].get<std::string>());
    } catch (const ValueError& e) {
      fail(source, "\"mode\"", e.what());
    }
  }
  if (!root.contains("rules")) fail(source, "top level", "has no \"rules\" list");
  const json& rules = root["rules"];
  if (!rules.is_array())
    fail(source, "\"rules\"", "must be a list of [pattern, layout] pairs, got " + type_name(rules));
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string where = fmt::format("rules[{}]", i);
    const json& r = rules[i];
    if (!r.is_array() || r.size() < 2 || r.size() > 3) {
      fail(source, where,
           fmt::format("must be a [pattern, layout] pair or a [pattern, layout, \"reason\"] "
                       "triple, got {} {}",
                       type_name(r), excerpt(r)));
    }
    if (!r[0].is_string()) {
      fail(source, where,
           fmt::format("the pattern must be a string, got {} {}", type_name(r[0]), excerpt(r[0])));
    }
    if (r.size() == 3 && !r[2].is_string()) {
      fail(source, where,
           fmt::format("the reason (third element) must be a string, got {} {}", type_name(r[2]),
                       excerpt(r[2])));
    }
    file.rules.emplace_back(r[0].get<std::string>(), parse_layout(r[1], source, where));
    file.reasons.push_back(r.size() == 3 ? r[2].get<std::string>() : std::string());
  }
  // Check every rule now, so a bad file is refused whole with the rule's position.
  (void)file.to_layout_map();
  return file;
}

LayoutMap RulesFile::to_layout_map(std::optional<MatchMode> mode_override) const {
  LayoutMap map(mesh, mode_override.value_or(mode));
  for (size_t i = 0; i < rules.size(); ++i) {
    try {
      map.set(rules[i].first, TensorLayout(rules[i].second));
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("rules[{}] ({}): {}", i, quote(rules[i].first), e.what()));
    }
  }
  return map;
}

RulesFile load_rules_file(const std::string& path) {
  // A regular file of at most 64 MiB (not /dev/zero, a FIFO or a directory); errno's reason.
  return parse_rules_json(read_regular_file(path, kMaxJsonFileBytes, "rules file"), path);
}

std::string layout_to_json(const TensorLayout& layout) {
  json out = json::array();
  for (const DimSharding& d : layout.axes()) {
    if (!d.is_sharded()) {
      out.push_back(nullptr);
    } else if (d.axes().size() == 1) {
      out.push_back(d.axes()[0]);
    } else {
      out.push_back(d.axes());
    }
  }
  return out.dump();
}

}  // namespace meshlayout
