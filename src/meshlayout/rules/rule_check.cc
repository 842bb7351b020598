#include "meshlayout/rules/rule_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/rules/rules_internal.h"

namespace meshlayout {
namespace {

using rules_internal::layout_text;

// The rules as a LayoutMap without a mesh (so a rule naming an axis the mesh lacks is still
// looked up; check_rules reports it apart).
LayoutMap lookup_map(const RuleSet& rules) {
  LayoutMap map(std::nullopt, rules.mode);
  for (const ConvertedRule& r : rules.rules) {
    try {
      map.set(r.pattern, TensorLayout(r.layout));
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("rule {}: {}", r.origin, e.what()));
    }
  }
  return map;
}

std::string shape_text(const Shape& shape) {
  return shape.size() == 1 ? fmt::format("({},)", shape[0])
                           : fmt::format("({})", fmt::join(shape, ", "));
}

std::string rule_names(const RuleSet& rules, const std::vector<size_t>& hits) {
  std::vector<std::string> out;
  for (size_t i : hits) out.push_back(rules.rules[i].origin);
  return fmt::format("{}", fmt::join(out, ", "));
}

// The total size of the mesh axes a layout splits over (each named axis counts 2 when the
// mesh is unknown: a split).
int64_t split_ways(const std::vector<DimSharding>& layout, const std::optional<DeviceMesh>& mesh) {
  int64_t ways = 1;
  for (const DimSharding& d : layout) {
    for (const std::string& axis : d.axes()) {
      ways *= mesh && mesh->axis_index(axis) ? mesh->axis_size(axis) : 2;
    }
  }
  return ways;
}

// One side of a diff: the layout text (normalised: no split is "replicated") and the rule.
std::pair<std::string, std::string> side(const RuleSet& rules, const LayoutMap& map,
                                         const std::string& path) {
  const MatchExplanation e = map.explain(path);
  if (e.verdict == MatchExplanation::Verdict::kAmbiguous) {
    return {"ambiguous: rules " + rule_names(rules, e.regex_hits), ""};
  }
  if (!e.chosen_rule) return {"replicated", ""};
  const ConvertedRule& r = rules.rules[*e.chosen_rule];
  const bool split = std::any_of(r.layout.begin(), r.layout.end(),
                                 [](const DimSharding& d) { return d.is_sharded(); });
  return {split ? layout_text(r.layout) : std::string("replicated"), r.origin};
}

}  // namespace

std::vector<std::string> check_rules(const RuleSet& rules, const std::vector<ModelTensor>& tensors,
                                     const RulesCheckOptions& options) {
  if (options.min_bytes < 0) {
    throw ValueError(fmt::format("min_bytes {} must be >= 0", options.min_bytes));
  }
  std::vector<std::string> problems;
  const LayoutMap map = lookup_map(rules);
  const std::optional<DeviceMesh>& mesh = rules.mesh;
  if (mesh) {
    for (const ConvertedRule& r : rules.rules) {
      for (const DimSharding& d : r.layout) {
        for (const std::string& axis : d.axes()) {
          if (!mesh->axis_index(axis)) {
            problems.push_back(fmt::format("rule {}: mesh axis {} is not an axis of {}", r.origin,
                                           quote(axis), mesh->to_string()));
          }
        }
      }
    }
  }
  std::vector<int64_t> decided(rules.rules.size(), 0), matched(rules.rules.size(), 0);
  for (const ModelTensor& t : tensors) {
    const MatchExplanation e = map.explain(t.path);
    for (size_t i : e.regex_hits) ++matched[i];
    if (e.exact_rule) ++matched[*e.exact_rule];
    if (!e.exact_rule && e.regex_hits.size() > 1) {
      problems.push_back(fmt::format(
          "tensor {} matches {} rules: {}{}", quote(t.path), e.regex_hits.size(),
          rule_names(rules, e.regex_hits),
          rules.mode == MatchMode::kFirst
              ? fmt::format(" (mode first: the first decides, the others silently lose)")
              : fmt::format(" (mode {} refuses the lookup)", match_mode_name(rules.mode))));
    }
    const std::string what =
        fmt::format("tensor {} {} ({} bytes)", quote(t.path), shape_text(t.shape), t.bytes);
    std::optional<size_t> chosen =
        e.verdict == MatchExplanation::Verdict::kAmbiguous ? std::nullopt : e.chosen_rule;
    if (chosen) {
      ++decided[*chosen];
      const ConvertedRule& r = rules.rules[*chosen];
      if (r.layout.size() != t.shape.size()) {
        problems.push_back(
            fmt::format("rule {} gives {} a layout of {} dimensions {}, but it has {}", r.origin,
                        what, r.layout.size(), layout_text(r.layout), t.shape.size()));
        continue;
      }
    }
    if (t.bytes <= options.min_bytes || e.verdict == MatchExplanation::Verdict::kAmbiguous) {
      continue;
    }
    if (!chosen) {
      problems.push_back(fmt::format("{} is replicated: no rule matches it (more than {} bytes)",
                                     what, options.min_bytes));
    } else if (split_ways(rules.rules[*chosen].layout, mesh) <= 1) {
      const ConvertedRule& r = rules.rules[*chosen];
      problems.push_back(
          fmt::format("{} is replicated: rule {} gives it {}, which splits {} (more than {} bytes)",
                      what, r.origin, layout_text(r.layout),
                      std::any_of(r.layout.begin(), r.layout.end(),
                                  [](const DimSharding& d) { return d.is_sharded(); })
                          ? "only over mesh axes of size 1"
                          : "no dimension",
                      options.min_bytes));
    }
  }
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    if (matched[i] == 0) {
      problems.push_back(fmt::format("rule {} is unused: it matches no tensor of the model",
                                     rules.rules[i].origin));
    } else if (decided[i] == 0 && rules.mode == MatchMode::kFirst) {
      problems.push_back(
          fmt::format("rule {} is unused: the {} tensors it matches are decided by earlier rules "
                      "(mode first)",
                      rules.rules[i].origin, matched[i]));
    }
  }
  return problems;
}

std::vector<LayoutDifference> diff_rules(const RuleSet& a, const RuleSet& b,
                                         const std::vector<ModelTensor>& tensors) {
  const LayoutMap map_a = lookup_map(a), map_b = lookup_map(b);
  std::vector<LayoutDifference> out;
  for (const ModelTensor& t : tensors) {
    auto [layout_a, rule_a] = side(a, map_a, t.path);
    auto [layout_b, rule_b] = side(b, map_b, t.path);
    if (layout_a == layout_b) continue;
    out.push_back(LayoutDifference{.path = t.path,
                                   .shape = t.shape,
                                   .a = std::move(layout_a),
                                   .b = std::move(layout_b),
                                   .rule_a = std::move(rule_a),
                                   .rule_b = std::move(rule_b)});
  }
  return out;
}

}  // namespace meshlayout
