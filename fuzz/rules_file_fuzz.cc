// rules_file_fuzz.cc — libFuzzer target for parse_rules_json (rules_file.h).
//
// Any input may be refused with a meshlayout::Error; anything else — another exception type,
// a crash, a sanitizer report, a leak, a timeout — is a finding. An accepted file must also:
//   * build a LayoutMap in every match mode (the file was accepted, so no mode may refuse it);
//   * answer lookups consistently: match_index(path) is explain(path).chosen_rule, or a
//     ValueError exactly when explain says the path is ambiguous (never an InternalError);
//   * parse back to the same mesh, mode and rules when written out again as JSON (with
//     layout_to_json for the layouts).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/layout_map/rules_file.h"

namespace {

using meshlayout::LayoutMap;
using meshlayout::MatchExplanation;
using meshlayout::MatchMode;
using meshlayout::RulesFile;

// Enough devices for any mesh a 4 KiB input can sensibly describe to be valid.
constexpr int64_t kFuzzDeviceCount = 4096;
// Lookups per accepted file and mode are capped so a file of many rules stays fast.
constexpr size_t kMaxPatternLookups = 16;

[[noreturn]] void finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "\nrules_file_fuzz FINDING: %.*s\n%.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

std::string rules_to_json(const RulesFile& file) {
  nlohmann::json root = nlohmann::json::object();
  if (file.mesh) {
    root["mesh"] = {{"shape", file.mesh->shape()},
                    {"axis_names", file.mesh->axis_names()},
                    {"devices", file.mesh->devices()}};
  }
  root["mode"] = std::string(meshlayout::match_mode_name(file.mode));
  nlohmann::json rules = nlohmann::json::array();
  for (const auto& [pattern, axes] : file.rules) {
    nlohmann::json layout =
        nlohmann::json::parse(meshlayout::layout_to_json(meshlayout::TensorLayout(axes)));
    rules.push_back(nlohmann::json::array({pattern, layout}));
  }
  root["rules"] = rules;
  return root.dump();
}

void check_lookup(const LayoutMap& map, std::string_view path) {
  const MatchExplanation e = map.explain(path);
  std::optional<size_t> index;
  try {
    index = map.match_index(path);
  } catch (const meshlayout::ValueError& error) {
    if (e.verdict != MatchExplanation::Verdict::kAmbiguous) {
      finding("match_index threw but explain() does not call the path ambiguous",
              std::string(path) + "\n" + error.what());
    }
    return;
  }
  if (e.verdict == MatchExplanation::Verdict::kAmbiguous) {
    finding("explain() calls the path ambiguous but match_index did not throw", std::string(path));
  }
  if (index != e.chosen_rule) {
    finding("match_index and explain() disagree", e.to_string(map));
  }
  (void)map.get(path);
}

void check_file(const RulesFile& file) {
  for (MatchMode mode : {MatchMode::kSearch, MatchMode::kFullmatch, MatchMode::kFirst}) {
    std::optional<LayoutMap> map;
    try {
      map.emplace(file.to_layout_map(mode));
    } catch (const meshlayout::Error& error) {
      finding("an accepted rules file is refused in another mode", error.what());
    }
    if (map->size() != file.rules.size()) finding("the map lost rules", "");
    std::vector<std::string> paths = {"", "dense/kernel", "my_model/dense_1/kernel", "d1.kernel"};
    for (size_t i = 0; i < file.rules.size() && i < kMaxPatternLookups; ++i) {
      paths.push_back(file.rules[i].first);
      paths.push_back(file.rules[i].first + "/kernel");
    }
    for (const std::string& path : paths) check_lookup(*map, path);
    (void)map->unused_rules(paths);
  }

  const std::string text = rules_to_json(file);
  RulesFile again;
  try {
    again = meshlayout::parse_rules_json(text, "round trip");
  } catch (const meshlayout::Error& error) {
    finding("a rules file written back as JSON is refused", text + "\n" + error.what());
  }
  if (again.mesh != file.mesh || again.mode != file.mode || again.rules != file.rules) {
    finding("a rules file written back as JSON parses to different rules", text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  meshlayout::set_device_count(kFuzzDeviceCount);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  RulesFile file;
  try {
    file = meshlayout::parse_rules_json(text, "fuzz input");
  } catch (const meshlayout::Error&) {
    return 0;  // refused with a message: fine
  }
  check_file(file);
  return 0;
}
