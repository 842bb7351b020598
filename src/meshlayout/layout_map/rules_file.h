// rules_file.h — a LayoutMap written as JSON, for the CLI and for sharing rules.
//
//   {"mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},      optional
//    "mode": "search",                                                 optional
//    "rules": [["dense.*kernel", [null, "model"]],
//              ["emb", [["data", "model"], null]]]}
//
// Each rule is [pattern, layout] or [pattern, layout, "why"] (a free-text reason, e.g. what
// `meshlayout rules suggest` writes; it changes nothing in the lookup); a layout entry is null
// (not split), an axis name, or a list of axis names (several axes on one dimension, major
// first). The mesh may also list "devices". Errors name the rule's position and what is wrong.
//
// Example:
//   RulesFile rules = parse_rules_json(text, "rules.json");
//   LayoutMap map = rules.to_layout_map();
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/layout_map/layout_map.h"

namespace meshlayout {

struct RulesFile {
  std::optional<DeviceMesh> mesh;
  MatchMode mode = MatchMode::kSearch;
  std::vector<std::pair<std::string, std::vector<DimSharding>>> rules;
  /// Each rule's reason (its third element; "" for none): reasons[i] belongs to rules[i], and a
  /// missing entry (reasons shorter than rules) means none.
  std::vector<std::string> reasons;

  /// The LayoutMap these rules describe; `mode` overrides the file's mode when given.
  /// ValueError (naming the rule's position) for a rule the map refuses.
  LayoutMap to_layout_map(std::optional<MatchMode> mode_override = std::nullopt) const;
};

/// Parses the JSON text of a rules file; `source` names it in messages. Throws ValueError.
RulesFile parse_rules_json(std::string_view json_text, std::string_view source = "rules");

/// Reads and parses a rules file: NotFoundError if it does not exist, ValueError if it is not
/// a regular file, is over kMaxJsonFileBytes (64 MiB), cannot be read (with errno's reason) or
/// is not a valid rules file.
RulesFile load_rules_file(const std::string& path);

/// The JSON form of a layout: [null, "model"], with a nested list for several axes.
std::string layout_to_json(const TensorLayout& layout);

}  // namespace meshlayout
