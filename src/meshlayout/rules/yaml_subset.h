// yaml_subset.h — a small strict YAML reader for rules files (MaxText's logical_axis_rules and
// logical_axes), returning JSON.
//
// The subset: block mappings (`key: value`, nested by indentation with spaces), block
// sequences (`- item`), flow sequences and mappings (`[a, [b, c], null]`, `{k: v}`, which may
// span lines), plain, 'single-' and "double-quoted" scalars, `#` comments, one optional `---`.
// A plain `null`, `Null`, `NULL` or `~` (or an empty value) is JSON null; every other scalar is
// a JSON string (numbers and booleans included: rules only hold names). Anything else YAML
// has (anchors, aliases, tags, block scalars `|` `>`, several documents, tabs as indentation,
// a key given twice) is a ValueError naming the line and column and what was expected —
// never a silent guess.
//
// Example:
//   nlohmann::ordered_json j = parse_yaml_subset("rules:\n  - ['embed', 'fsdp']\n", "a.yml");
//   // {"rules": [["embed", "fsdp"]]}
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace meshlayout {

/// Parses `text` (YAML, the subset above) into JSON, keys in file order; `source` names the
/// text in messages ("rules.yml:3:7: ..."). ValueError for anything outside the subset.
nlohmann::ordered_json parse_yaml_subset(std::string_view text, std::string_view source = "yaml");

/// `value` (strings, nulls, lists and objects) written as YAML block text that
/// parse_yaml_subset reads back equal: objects as block mappings, a list holding lists or
/// objects as a block sequence of flow items, other lists as flow sequences, strings
/// single-quoted.
std::string write_yaml_subset(const nlohmann::ordered_json& value);

}  // namespace meshlayout
