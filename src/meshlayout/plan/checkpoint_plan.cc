#include "meshlayout/plan/checkpoint_plan.h"

#include <fmt/format.h>

#include <functional>
#include <limits>
#include <unordered_map>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/plan/text_format.h"

namespace meshlayout {
namespace {

constexpr size_t kNoRule = std::numeric_limits<size_t>::max();

struct PlacementKey {
  size_t rule;
  size_t element_size;
  Shape shape;
  friend bool operator==(const PlacementKey&, const PlacementKey&) = default;
};

struct PlacementKeyHash {
  size_t operator()(const PlacementKey& k) const {
    size_t h = std::hash<size_t>{}(k.rule) * 31 + k.element_size;
    for (int64_t e : k.shape) h = h * 1000003 ^ std::hash<int64_t>{}(e);
    return h;
  }
};

std::string uneven_text(const UnevenDim& u) {
  const int64_t block = ceil_div(u.size, u.parts);
  const int64_t full = u.size / block;
  const int64_t rest = u.size % block;
  const int64_t empty = u.parts - full - (rest ? 1 : 0);
  std::string blocks = fmt::format("{} of {}", plural(static_cast<size_t>(full), "block"), block);
  if (rest) blocks += fmt::format(", 1 of {}", rest);
  if (empty) blocks += fmt::format(", {} empty", empty);
  return fmt::format("dimension {} (size {}) is split over {} of total size {}: {}", u.dim, u.size,
                     u.axes.size() == 1 ? fmt::format("axis {}", quote(u.axes[0]))
                                        : fmt::format("axes {}", repr_list(u.axes)),
                     u.parts, blocks);
}

std::string describe(const TensorInfo& t) {
  return fmt::format("tensor {} ({} {})", quote(t.name), t.dtype_name, shape_to_string(t.shape));
}

}  // namespace

std::string_view plan_issue_kind_name(PlanIssue::Kind kind) {
  switch (kind) {
    case PlanIssue::Kind::kAmbiguous:
      return "ambiguous";
    case PlanIssue::Kind::kRankMismatch:
      return "rank_mismatch";
    case PlanIssue::Kind::kOtherMesh:
      return "other_mesh";
    case PlanIssue::Kind::kUneven:
      return "uneven";
    case PlanIssue::Kind::kLargeReplicated:
      return "large_replicated";
    case PlanIssue::Kind::kUnusedRule:
      return "unused_rule";
    case PlanIssue::Kind::kModelSplit:
      return "model_split";
  }
  return "unknown";
}

CheckpointPlan plan_tensors(std::span<const TensorInfo* const> tensors, const LayoutMap& map,
                            const PlanOptions& options) {
  if (!map.device_mesh()) {
    throw ValueError(
        "cannot plan a checkpoint with a LayoutMap that has no device mesh: the plan is per "
        "device of the map's mesh");
  }
  CheckpointPlan plan{.mesh = *map.device_mesh(), .mode = map.mode(), .options = options};
  const DeviceMesh& mesh = plan.mesh;
  using Severity = PlanIssue::Severity;
  using Kind = PlanIssue::Kind;
  auto add_issue = [&](Severity severity, Kind kind, std::optional<size_t> tensor,
                       std::optional<size_t> rule, std::string message) {
    (severity == Severity::kError ? plan.num_errors : plan.num_warnings)++;
    plan.issues.push_back({severity, kind, tensor, rule, std::move(message)});
  };

  // Each rule's layout on the plan's mesh; std::nullopt for a layout on another mesh.
  std::vector<std::optional<TensorLayout>> rule_layouts;
  for (const LayoutRule& rule : map.rules()) {
    const TensorLayout bare(rule.layout.axes());
    plan.rules.push_back({rule.pattern, bare.to_string(), layout_to_json(bare), 0});
    if (rule.layout.device_mesh() && !(*rule.layout.device_mesh() == mesh)) {
      rule_layouts.emplace_back();
    } else {
      rule_layouts.emplace_back(TensorLayout(rule.layout.axes(), mesh));
    }
  }

  std::unordered_map<PlacementKey, size_t, PlacementKeyHash> placement_index;
  std::vector<std::optional<ShardGeometry>> geometries;  // per placement, if it fits
  std::vector<uint64_t> placement_count;                 // tensors without error per placement
  auto find_placement = [&](size_t rule, const TensorInfo& t) -> size_t {
    PlacementKey key{rule, t.element_size, t.shape};
    auto [it, inserted] = placement_index.try_emplace(std::move(key), plan.placements.size());
    if (!inserted) return it->second;
    Placement p;
    if (rule != kNoRule) p.rule = rule;
    p.shape = t.shape;
    p.element_size = t.element_size;
    const TensorLayout layout =
        rule == kNoRule ? TensorLayout::replicated(static_cast<int>(t.shape.size()), mesh)
                        : *rule_layouts[rule];
    std::optional<ShardGeometry> g;
    try {
      g.emplace(layout, t.shape);
    } catch (const ValueError&) {
      p.fits = false;
    }
    if (g) {
      p.shard_shape = g->box(0).shape;
      p.shard_bytes = static_cast<uint64_t>(g->max_box_elements()) * t.element_size;
      p.num_replicas = g->num_replicas();
      p.uneven = g->uneven_dims();
    }
    plan.placements.push_back(std::move(p));
    geometries.push_back(std::move(g));
    placement_count.push_back(0);
    return it->second;
  };

  std::vector<bool> rule_used(map.size(), false);
  plan.tensors.reserve(tensors.size());
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const TensorInfo& t = *tensors[ti];
    plan.total_bytes += t.num_bytes();
    PlannedTensor& pt = plan.tensors.emplace_back();
    pt.info = &t;
    // One pass over the rules gives the verdict and every hit (for the unused-rule check,
    // the same as LayoutMap::unused_rules over the names).
    const MatchExplanation e = map.explain(t.name);
    if (e.exact_rule) rule_used[*e.exact_rule] = true;
    for (size_t h : e.regex_hits) rule_used[h] = true;
    if (e.verdict == MatchExplanation::Verdict::kAmbiguous) {
      try {
        (void)map.match_index(t.name);  // throws the map's own message
        pt.error = fmt::format("path {} matches several rules", quote(t.name));
      } catch (const ValueError& err) {
        pt.error = err.what();
      }
      add_issue(Severity::kError, Kind::kAmbiguous, ti, std::nullopt, pt.error);
      continue;
    }
    const size_t rule = e.chosen_rule ? *e.chosen_rule : kNoRule;
    if (rule != kNoRule) {
      ++plan.rules[rule].tensors;
      if (!rule_layouts[rule]) {
        pt.error = fmt::format(
            "{} is decided by rule #{} ({}), whose layout {} is on another "
            "mesh than the plan's {}",
            describe(t), rule, quote(plan.rules[rule].pattern), map.rule(rule).layout.to_string(),
            mesh.to_string());
        add_issue(Severity::kError, Kind::kOtherMesh, ti, rule, pt.error);
        continue;
      }
    }
    pt.placement = find_placement(rule, t);
    const Placement& p = plan.placements[*pt.placement];
    const std::string what = fmt::format("tensor {}", quote(t.name));
    if (!p.fits) {
      try {
        rule_layouts[rule]->check_shape(t.shape, {}, what);
        pt.error = what + " does not fit its layout";
      } catch (const ValueError& err) {
        pt.error =
            fmt::format("{} (rule #{} {})", err.what(), rule, quote(plan.rules[rule].pattern));
      }
      add_issue(Severity::kError, Kind::kRankMismatch, ti, rule, pt.error);
      continue;
    }
    if (!p.uneven.empty()) {
      const std::string& layout_text =
          rule == kNoRule ? std::string() : plan.rules[rule].layout_text;
      if (options.strict) {
        try {
          rule_layouts[rule]->check_shape(t.shape, {.strict = true}, what);
          pt.error = what + " is split unevenly";
        } catch (const ValueError& err) {
          pt.error = err.what();
        }
        add_issue(Severity::kError, Kind::kUneven, ti, rule, pt.error);
        continue;
      }
      std::string message = fmt::format("{} under {}:", describe(t), layout_text);
      for (size_t i = 0; i < p.uneven.size(); ++i) {
        message += (i ? "; " : " ") + uneven_text(p.uneven[i]);
      }
      add_issue(Severity::kWarning, Kind::kUneven, ti, rule, std::move(message));
    }
    if (rule == kNoRule && options.replicated_warn_bytes > 0 && mesh.size() > 1 &&
        t.num_bytes() >= options.replicated_warn_bytes) {
      pt.large_replicated = true;
      add_issue(Severity::kWarning, Kind::kLargeReplicated, ti, std::nullopt,
                fmt::format("{}, {}, matches no rule: each of the {} devices holds all of it "
                            "(warning from {})",
                            describe(t), format_bytes(t.num_bytes()), mesh.size(),
                            format_bytes(options.replicated_warn_bytes)));
    }
    ++placement_count[*pt.placement];
    (p.num_replicas == mesh.size() ? plan.num_replicated : plan.num_sharded)++;
  }

  for (size_t r = 0; r < rule_used.size(); ++r) {
    if (!rule_used[r]) {
      add_issue(
          Severity::kWarning, Kind::kUnusedRule, std::nullopt, r,
          fmt::format("rule #{} ({} -> {}) matches none of the {} tensors", r,
                      quote(plan.rules[r].pattern), plan.rules[r].layout_text, tensors.size()));
    }
  }

  // Per-device totals: an evenly split placement puts the same bytes on every device.
  plan.device_bytes.assign(static_cast<size_t>(mesh.size()), 0);
  uint64_t uniform = 0;
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    const Placement& p = plan.placements[i];
    if (placement_count[i] == 0) continue;
    if (p.uneven.empty()) {
      uniform += placement_count[i] * p.shard_bytes;
      continue;
    }
    for (int64_t d = 0; d < mesh.size(); ++d) {
      plan.device_bytes[static_cast<size_t>(d)] +=
          placement_count[i] * static_cast<uint64_t>(geometries[i]->box(d).num_elements()) *
          p.element_size;
    }
  }
  for (uint64_t& b : plan.device_bytes) b += uniform;
  return plan;
}

CheckpointPlan plan_checkpoint(const Checkpoint& checkpoint, const LayoutMap& map,
                               const PlanOptions& options, std::string source) {
  std::vector<const TensorInfo*> infos;
  infos.reserve(checkpoint.tensors().size());
  for (const auto& [file, info] : checkpoint.tensors()) infos.push_back(info);
  CheckpointPlan plan = plan_tensors(infos, map, options);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    plan.tensors[i].file = &checkpoint.tensors()[i].first->path();
  }
  plan.source = std::move(source);
  plan.num_files = checkpoint.files().size();
  return plan;
}

}  // namespace meshlayout
