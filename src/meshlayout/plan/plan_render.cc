#include "meshlayout/plan/plan_render.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meshlayout/core/strings.h"
#include "meshlayout/plan/text_format.h"

namespace meshlayout {
namespace {

struct PlacementCells {
  std::string shape, bytes, shard, shard_bytes;
};

std::vector<PlacementCells> placement_cells(const CheckpointPlan& plan) {
  std::vector<PlacementCells> cells;
  cells.reserve(plan.placements.size());
  for (const Placement& p : plan.placements) {
    const uint64_t bytes = static_cast<uint64_t>(num_elements(p.shape)) * p.element_size;
    cells.push_back({shape_to_string(p.shape), format_bytes(bytes),
                     p.fits ? shape_to_string(p.shard_shape) : "-",
                     p.fits ? format_bytes(p.shard_bytes) : "-"});
  }
  return cells;
}

Json issue_json(const CheckpointPlan& plan, size_t i) {
  const PlanIssue& issue = plan.issues[i];
  Json j = {{"kind", plan_issue_kind_name(issue.kind)}};
  if (issue.tensor) j["tensor"] = plan.tensors[*issue.tensor].info->name;
  if (issue.rule) j["rule"] = *issue.rule;
  j["message"] = issue.message;
  return j;
}

}  // namespace

std::string render_plan_text(const CheckpointPlan& plan) {
  std::string out;
  const DeviceMesh& mesh = plan.mesh;
  put(out, "plan{}{}: {}{}, {} ({} bytes) on {} ({}), mode {}{}\n\n",
      plan.source.empty() ? "" : " of ", plan.source.empty() ? "" : quote(plan.source),
      plural(plan.tensors.size(), "tensor"),
      plan.num_files > 1 ? fmt::format(" in {} files", plan.num_files) : "",
      format_bytes(plan.total_bytes), plan.total_bytes, mesh.to_string(),
      plural(static_cast<size_t>(mesh.size()), "device"), match_mode_name(plan.mode),
      plan.options.strict ? ", strict" : "");

  // The tensor table: cells are views into the per-placement and per-rule texts.
  constexpr size_t kCols = 10;
  constexpr bool kRight[kCols] = {false, false, false, true, false,
                                  false, false, false, true, false};
  using Row = std::array<std::string_view, kCols>;
  const std::vector<PlacementCells> cells = placement_cells(plan);
  std::vector<std::string> rule_ids;
  for (size_t r = 0; r < plan.rules.size(); ++r) rule_ids.push_back(fmt::format("#{}", r));
  // Shape and bytes of the (rare) tensors without a placement, by tensor index.
  std::unordered_map<size_t, std::array<std::string, 2>> unplaced;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorInfo& info = *plan.tensors[i].info;
    if (!plan.tensors[i].placement) {
      unplaced[i] = {shape_to_string(info.shape), format_bytes(info.num_bytes())};
    }
  }
  // Row 0 is the heading, row i + 1 tensor i. Rows are built twice (widths, then lines)
  // rather than stored: they are views, cheap to make, and 100,000 of them would be 16 MB.
  auto row_of = [&](size_t r) -> Row {
    if (r == 0) {
      return {"tensor",  "dtype",  "shape", "bytes",       "rule",
              "pattern", "layout", "shard", "shard bytes", "note"};
    }
    const PlannedTensor& t = plan.tensors[r - 1];
    Row row;
    row[0] = t.info->name;
    row[1] = t.info->dtype_name;
    std::optional<size_t> rule;
    if (t.placement) {
      const PlacementCells& c = cells[*t.placement];
      rule = plan.placements[*t.placement].rule;
      row[2] = c.shape;
      row[3] = c.bytes;
      row[7] = c.shard;
      row[8] = c.shard_bytes;
    } else {
      const auto& texts = unplaced.at(r - 1);
      row[2] = texts[0];
      row[3] = texts[1];
      row[7] = row[8] = "-";
    }
    if (rule) {
      row[4] = rule_ids[*rule];
      row[5] = plan.rules[*rule].pattern;
      row[6] = plan.rules[*rule].layout_text;
    } else {
      row[4] = row[5] = "-";
      row[6] = t.placement ? "replicated" : "-";
    }
    if (!t.ok()) {
      row[9] = "ERROR";
    } else if (!plan.placements[*t.placement].uneven.empty()) {
      row[9] = "uneven";
    } else if (t.large_replicated) {
      row[9] = "large, replicated";
    }
    return row;
  };
  const size_t num_rows = plan.tensors.size() + 1;
  std::array<size_t, kCols> width{};
  for (size_t r = 0; r < num_rows; ++r) {
    const Row row = row_of(r);
    for (size_t c = 0; c < kCols; ++c) width[c] = std::max(width[c], text_width(row[c]));
  }
  // One allocation for the table (a 100,000-line table is ~15 MB; growing into it would copy
  // it several times, each time into freshly mapped pages).
  size_t line_bytes = 2 * kCols;
  for (size_t w : width) line_bytes += w + 4;  // (+ room for multi-byte UTF-8)
  out.reserve(out.size() + num_rows * line_bytes + 64 * 1024);
  for (size_t r = 0; r < num_rows; ++r) {
    const Row row = row_of(r);
    for (size_t c = 0; c < kCols; ++c) {
      const size_t pad = width[c] - text_width(row[c]);
      if (kRight[c]) out.append(pad, ' ');
      out.append(row[c]);
      if (c + 1 == kCols) break;
      if (!kRight[c]) out.append(pad, ' ');
      out.append("  ");
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  }

  // Rules.
  size_t unmatched = 0;
  for (const PlannedTensor& t : plan.tensors) {
    unmatched += t.placement && !plan.placements[*t.placement].rule;
  }
  put(out, "\nrules ({}):\n", plural(plan.rules.size(), "rule"));
  size_t pattern_width = 0;
  size_t layout_width = 0;
  for (const PlannedRule& r : plan.rules) {
    pattern_width = std::max(pattern_width, text_width(r.pattern));
    layout_width = std::max(layout_width, text_width(r.layout_text));
  }
  for (size_t r = 0; r < plan.rules.size(); ++r) {
    const PlannedRule& rule = plan.rules[r];
    put(out, "  {:<4}  {}{}  {}{}  {}\n", rule_ids[r], rule.pattern,
        std::string(pattern_width - text_width(rule.pattern), ' '), rule.layout_text,
        std::string(layout_width - text_width(rule.layout_text), ' '),
        plural(rule.tensors, "tensor"));
  }
  put(out, "  no rule (replicated): {}\n", plural(unmatched, "tensor"));

  // Devices.
  put(out, "\nper device ({}{}):\n", mesh.to_string(),
      plan.num_errors ? "; tensors with errors left out" : "");
  std::vector<std::string> device_rows;
  size_t device_width = 6;
  size_t coords_width = 6;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    device_width = std::max(device_width, mesh.devices()[static_cast<size_t>(p)].size());
  }
  std::vector<std::string> coords;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    coords.push_back(shape_to_string(mesh.coords(p)));
    coords_width = std::max(coords_width, coords.back().size());
  }
  put(out, "  {:<{}}  {:<{}}  {:>10}  bytes\n", "device", device_width, "coords", coords_width,
      "size");
  uint64_t sum = 0;
  uint64_t most = 0;
  int64_t most_at = 0;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    const uint64_t b = plan.device_bytes[static_cast<size_t>(p)];
    put(out, "  {:<{}}  {:<{}}  {:>10}  {}\n", mesh.devices()[static_cast<size_t>(p)], device_width,
        coords[static_cast<size_t>(p)], coords_width, format_bytes(b), b);
    sum += b;
    if (b > most) most = b, most_at = p;
  }
  put(out, "  all devices hold {} ({} bytes); the most, {}, is on {}\n", format_bytes(sum), sum,
      format_bytes(most), mesh.devices()[static_cast<size_t>(most_at)]);
  put(out, "  tensors: {} sharded, {} replicated, {} with errors\n", plan.num_sharded,
      plan.num_replicated, plan.tensors.size() - plan.num_sharded - plan.num_replicated);

  // Issues.
  for (PlanIssue::Severity severity :
       {PlanIssue::Severity::kWarning, PlanIssue::Severity::kError}) {
    const bool warnings = severity == PlanIssue::Severity::kWarning;
    const size_t n = warnings ? plan.num_warnings : plan.num_errors;
    if (n == 0) continue;
    put(out, "\n{} ({}):\n", warnings ? "warnings" : "errors", n);
    for (const PlanIssue& issue : plan.issues) {
      if (issue.severity != severity) continue;
      put(out, "  {}: {}\n", plan_issue_kind_name(issue.kind), issue.message);
    }
  }
  put(out, "\n{}: {}, {}\n", plan.ok() ? "plan OK" : "plan has errors",
      plural(plan.num_errors, "error"), plural(plan.num_warnings, "warning"));
  return out;
}

std::string render_plan_json(const CheckpointPlan& plan) {
  const DeviceMesh& mesh = plan.mesh;
  std::string out;
  Json head = {
      {"source", plan.source},
      {"files", plan.num_files},
      {"mesh",
       {{"text", mesh.to_string()}, {"shape", mesh.shape()}, {"axis_names", mesh.axis_names()}}},
      {"mode", match_mode_name(plan.mode)},
      {"strict", plan.options.strict},
      {"replicated_warn_bytes", plan.options.replicated_warn_bytes}};
  append_json(out, head);
  out.pop_back();  // the lists follow inside the same object

  std::vector<Json> layouts;  // per rule
  for (const PlannedRule& rule : plan.rules) layouts.push_back(Json::parse(rule.layout_json));
  append_json_list(out, "rules", plan.rules.size(), [&](size_t r) {
    const PlannedRule& rule = plan.rules[r];
    return Json{
        {"index", r}, {"pattern", rule.pattern}, {"layout", layouts[r]}, {"tensors", rule.tensors}};
  });

  // The tensor lines are the bulk (100,000 of them for a large model): the fields a placement
  // decides (shape, bytes, rule, layout, shard) are written once per placement and spliced
  // into each of its lines, so per tensor only the path, file and dtype are written (copied
  // as they are when they need no escaping).
  auto rule_fields = [&](std::optional<size_t> rule, Json& j) {
    j["rule"] = rule ? Json(*rule) : Json(nullptr);
    j["pattern"] = rule ? Json(plan.rules[*rule].pattern) : Json(nullptr);
    j["layout"] = rule ? layouts[*rule] : Json(nullptr);
  };
  std::vector<std::string> placement_fields;
  for (const Placement& p : plan.placements) {
    Json j = {{"shape", p.shape},
              {"bytes", static_cast<uint64_t>(num_elements(p.shape)) * p.element_size}};
    rule_fields(p.rule, j);
    if (p.fits) {
      j["shard_shape"] = p.shard_shape;
      j["shard_bytes"] = p.shard_bytes;
      j["replicas"] = p.num_replicas;
      j["uneven"] = !p.uneven.empty();
    }
    placement_fields.push_back(json_members(j));
  }
  size_t tensors_bytes = 0;  // reserved at once, as for the text table
  for (const PlannedTensor& t : plan.tensors) {
    tensors_bytes += 64 + t.info->name.size() + (t.file ? t.file->size() : 0) +
                     (t.placement ? placement_fields[*t.placement].size() : 256);
  }
  out.reserve(out.size() + tensors_bytes + 64 * 1024);
  out += ",\n\"tensors\":[";
  const std::string* file = nullptr;
  std::string file_field;  // `,"file":"…"` of `file` (tensors come file by file)
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const PlannedTensor& t = plan.tensors[i];
    out += i ? ",\n {\"path\":" : "\n {\"path\":";
    append_json_string(out, t.info->name);
    if (t.file && t.file != file) {
      file = t.file;
      file_field = ",\"file\":";
      append_json_string(file_field, *file);
    }
    if (t.file) out += file_field;
    out += ",\"dtype\":";
    append_json_string(out, t.info->dtype_name);
    out += ',';
    if (t.placement) {
      out += placement_fields[*t.placement];
    } else {
      Json j = {{"shape", t.info->shape}, {"bytes", t.info->num_bytes()}};
      rule_fields(std::nullopt, j);
      out += json_members(j);
    }
    if (!t.ok()) {
      out += ",\"error\":";
      append_json(out, t.error);
    }
    out += '}';
  }
  out += ']';

  uint64_t sum = 0;
  uint64_t most = 0;
  for (uint64_t b : plan.device_bytes) sum += b, most = std::max(most, b);
  append_json_list(out, "devices", plan.device_bytes.size(), [&](size_t d) {
    return Json{{"device", mesh.devices()[d]},
                {"coords", mesh.coords(static_cast<int64_t>(d))},
                {"bytes", plan.device_bytes[d]}};
  });
  out += ",\n\"totals\":";
  append_json(out, Json{{"tensors", plan.tensors.size()},
                        {"bytes", plan.total_bytes},
                        {"sharded", plan.num_sharded},
                        {"replicated", plan.num_replicated},
                        {"errors", plan.num_errors},
                        {"warnings", plan.num_warnings},
                        {"device_bytes_sum", sum},
                        {"device_bytes_max", most}});
  for (PlanIssue::Severity severity :
       {PlanIssue::Severity::kWarning, PlanIssue::Severity::kError}) {
    std::vector<size_t> which;
    for (size_t i = 0; i < plan.issues.size(); ++i) {
      if (plan.issues[i].severity == severity) which.push_back(i);
    }
    append_json_list(out, severity == PlanIssue::Severity::kWarning ? "warnings" : "errors",
                     which.size(), [&](size_t k) { return issue_json(plan, which[k]); });
  }
  out += "}\n";
  return out;
}

}  // namespace meshlayout
