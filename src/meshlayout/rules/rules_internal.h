// rules_internal.h — pieces shared by the dialect readers and writers of rule_dialects.h
// (rule_dialects.cc: common helpers, globs, the entry points; keras_hub_rules.cc: keras-hub
// and meshlayout files;
// hf_tp_plan.cc / hf_tp_plan_write.cc: Hugging Face plans read / written; maxtext_rules.cc:
// Flax/MaxText rules). Internal: not
// part of the library's API.
//
// Example (hf_tp_plan.cc):
//   ConvertedRule r{.pattern = glob_to_regex("model.norm.weight"), .layout = {DimSharding()}};
//   check_layout(r, options.mesh);   // ValueError naming the rule for an axis used twice
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/rules/rule_dialects.h"

namespace meshlayout::rules_internal {

using ojson = nlohmann::ordered_json;
using Layout = std::vector<DimSharding>;

/// ValueError "<source> <where>: <what>".
[[noreturn]] void fail(std::string_view source, const std::string& where, const std::string& what);
/// "a string", "a list", … and a short JSON excerpt, for messages.
std::string type_of(const ojson& j);
std::string excerpt(const ojson& j);
/// [null, "model", ["data", "model"]] and its text with ", " between items.
ojson layout_json(const Layout& layout);
std::string spaced_json(const ojson& j);
std::string layout_text(const Layout& layout);
/// null, an axis name, or a list of axis names; ValueError naming `where` otherwise.
DimSharding parse_dim(const ojson& e, std::string_view source, const std::string& where);
Layout parse_layout(const ojson& j, std::string_view source, const std::string& where);
/// A mesh axis at most once per layout, and `mesh`'s axes only (when given).
void check_layout(const ConvertedRule& rule, const std::optional<DeviceMesh>& mesh);
/// JSON keeping the file's key order (depth-limited, duplicate keys refused).
ojson parse_json_ordered(std::string_view text, std::string_view source);

/// A pattern's glob ('*' for \d+) and whether it is anchored at both ends.
struct GlobForm {
  std::string glob;
  bool anchored = false;
};
std::optional<GlobForm> glob_form(std::string_view pattern);
/// The glob of `rule` where `target` needs a path: ValueError naming the rule for regex
/// features; a warning when an unanchored pattern becomes an exact path.
std::string rule_glob(const ConvertedRule& rule, MatchMode mode, std::string_view target,
                      std::vector<std::string>& warnings);
/// options.name_map, else the family's registered map.
const HfNameMap& name_map_of(const ConvertOptions& options);
/// `glob` with every '*' replaced by `index`.
std::string replace_stars(std::string_view glob, int64_t index);
/// options.layer_indices, else 0, 1, 2, 3, 7 and 31.
std::vector<int64_t> checked_layers(const ConvertOptions& options);
/// `rules` with each rule whose pattern is no glob replaced by one rule per variable glob of
/// the family's name map (keras-hub paths and HF names) that it decides in every checked
/// layer, with a warning; ValueError naming the rule when it decides none, or decides some
/// layers of a glob and not others. `target` names what needs globs, for messages.
RuleSet expand_to_globs(const RuleSet& rules, const ConvertOptions& options,
                        std::string_view target, std::vector<std::string>& warnings);

/// The parameter layouts of a Hugging Face style: the weight's output dimension split
/// (colwise and its variants), its input dimension (rowwise …), or none (replicate …).
enum class HfStyleKind { kColwise, kRowwise, kReplicated };
/// The kind of a style meshlayout reads; std::nullopt for another name.
std::optional<HfStyleKind> hf_style_kind(std::string_view style);
/// With the model's sizes (options.model_mappings) and a mesh: a warning when HF dimension
/// `hf_dim` of `p` is a reshape (heads*head_dim) whose major part the tensor-parallel axis
/// does not divide, so that HF's flat blocks and keras-hub's blocks of whole heads differ.
void warn_uneven_reshape(const HfParamName& p, int hf_dim, const ConvertOptions& options,
                         const std::string& origin, std::vector<std::string>& warnings);

RuleSet read_hf(std::string_view text, const ConvertOptions& options, std::string_view source);
std::string write_hf(const RuleSet& rules, const ConvertOptions& options,
                     std::vector<std::string>& warnings);
/// A warning for each rule read from an HF style that means more than its parameters'
/// layouts (colwise_rep, local_*, sequence_parallel, …), written to dialect `to`.
void warn_dropped_activation_semantics(const RuleSet& rules, RulesDialect to,
                                       std::vector<std::string>& warnings);

/// keras-hub's get_layout_map as JSON or as Python prints the dict; meshlayout's rules file.
RuleSet read_keras_hub(std::string_view text, const ConvertOptions& options,
                       std::string_view source);
RuleSet read_meshlayout(std::string_view text, const ConvertOptions& options,
                        std::string_view source);
/// The rules as lines: `  "pattern": layout,` (as_object: keras-hub's JSON) or
/// `    ["pattern", layout, "reason"],` (a meshlayout file's rules list).
std::string rules_lines(const RuleSet& rules, bool as_object);

RuleSet read_maxtext(std::string_view text, const ConvertOptions& options, std::string_view source);
std::string write_maxtext(const RuleSet& rules, const ConvertOptions& options,
                          std::vector<std::string>& warnings);

}  // namespace meshlayout::rules_internal
