#include "meshlayout/plan/plan_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/plan/text_format.h"

namespace meshlayout {
namespace {

// --- bytes by kind --------------------------------------------------------------------------

struct ByteKind {
  const char* name;
  const char* colour;
  uint64_t DeviceMemoryPlan::*field;
};
constexpr std::array<ByteKind, 6> kKinds = {{
    {"weights", "#4e79a7", &DeviceMemoryPlan::weights},
    {"gradients", "#f28e2b", &DeviceMemoryPlan::gradients},
    {"optimizer slots", "#59a14f", &DeviceMemoryPlan::slots},
    {"activations", "#b07aa1", &DeviceMemoryPlan::activations},
    {"key/value cache", "#9c755f", &DeviceMemoryPlan::cache},
    {"reshard temporaries", "#bab0ac", &DeviceMemoryPlan::reshard_temp},
}};

uint64_t stacked(const DeviceMemoryPlan& d) {
  uint64_t sum = 0;
  for (const ByteKind& k : kKinds) sum += d.*k.field;
  return sum;
}

// Consecutive mesh positions as device-name ranges: "cpu:0…cpu:3, cpu:8".
std::string device_ranges(const DeviceMesh& mesh, const std::vector<int64_t>& positions,
                          size_t max_ranges = 4) {
  std::vector<std::string> parts;
  size_t ranges = 0;
  for (size_t i = 0; i < positions.size();) {
    size_t j = i;
    while (j + 1 < positions.size() && positions[j + 1] == positions[j] + 1) ++j;
    if (++ranges > max_ranges) {
      parts.push_back("…");
      break;
    }
    const std::string& first = mesh.devices()[static_cast<size_t>(positions[i])];
    parts.push_back(j == i ? first
                           : fmt::format("{}{}{}", first, j == i + 1 ? ", " : "…",
                                         mesh.devices()[static_cast<size_t>(positions[j])]));
    i = j + 1;
  }
  return join(parts, ", ");
}

void render_bars(const CheckpointPlan& plan, const PlanHtmlOptions& o,
                 const std::vector<DeviceMemoryPlan>& memory, std::string& out) {
  const DeviceMesh& mesh = plan.mesh;
  const int64_t n = mesh.size();
  std::vector<const ByteKind*> kinds;
  for (const ByteKind& k : kKinds) {
    for (const DeviceMemoryPlan& d : memory) {
      if (d.*k.field) {
        kinds.push_back(&k);
        break;
      }
    }
  }
  // Bars: one per device, or per group of devices with the same bytes of every kind.
  struct Bar {
    DeviceMemoryPlan bytes;
    std::vector<int64_t> positions;
  };
  std::vector<Bar> bars;
  if (n <= o.max_bars) {
    for (int64_t p = 0; p < n; ++p) bars.push_back({memory[static_cast<size_t>(p)], {p}});
  } else {
    std::map<std::array<uint64_t, 8>, size_t> index;
    for (int64_t p = 0; p < n; ++p) {
      const DeviceMemoryPlan& d = memory[static_cast<size_t>(p)];
      const std::array<uint64_t, 8> key = {d.weights, d.gradients,    d.slots, d.activations,
                                           d.cache,   d.reshard_temp, d.peak,  d.fits};
      auto [it, added] = index.try_emplace(key, bars.size());
      if (added) bars.push_back({d, {}});
      bars[it->second].positions.push_back(p);
    }
  }
  const size_t distinct = bars.size();
  if (static_cast<int64_t>(bars.size()) > o.max_bars) {
    std::stable_sort(bars.begin(), bars.end(), [](const Bar& a, const Bar& b) {
      return std::max(stacked(a.bytes), a.bytes.peak) > std::max(stacked(b.bytes), b.bytes.peak);
    });
    bars.resize(static_cast<size_t>(o.max_bars));
  }
  uint64_t scale = o.device_memory.value_or(0);
  for (const Bar& b : bars) scale = std::max({scale, stacked(b.bytes), b.bytes.peak});
  scale = std::max<uint64_t>(scale, 1);

  put(out, "<section id=\"memory\"><h2>Bytes per device</h2>\n<p>");
  if (n > o.max_bars) {
    put(out, "{} devices with {} distinct mixes of bytes: one bar per mix, naming its devices{}.",
        n, distinct,
        distinct > bars.size() ? fmt::format("; the {} largest of {} drawn", bars.size(), distinct)
                               : std::string());
  } else {
    put(out, "One bar per device.");
  }
  if (o.device_memory) {
    put(out, " The red line is the device memory, {}.", format_bytes(*o.device_memory));
  }
  if (std::any_of(bars.begin(), bars.end(), [](const Bar& b) { return b.bytes.peak > 0; })) {
    out += " The black tick is each device's peak (what it holds at once).";
  }
  out += "</p>\n<p class=\"legend\">";
  for (const ByteKind* k : kinds) {
    put(out, "<span><i style=\"background:{}\"></i>{}</span> ", k->colour, k->name);
  }
  out += "</p>\n";
  const int label_w = n <= o.max_bars ? 130 : 330, bar_w = 520, row = 20, top = 6;
  const int width = label_w + bar_w + 110;
  const int height = top + row * static_cast<int>(bars.size()) + 6;
  put(out,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"monospace\" font-size=\"11\">",
      width, height);
  const auto x_of = [&](uint64_t bytes) {
    return label_w +
           static_cast<double>(bar_w) * static_cast<double>(bytes) / static_cast<double>(scale);
  };
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int y = top + row * static_cast<int>(i);
    const std::string label =
        b.positions.size() == 1
            ? mesh.devices()[static_cast<size_t>(b.positions.front())]
            : fmt::format("{} devices: {}", b.positions.size(), device_ranges(mesh, b.positions));
    if (n <= o.max_bars && n <= o.draw.max_device_cells) {
      put(out, "<rect x=\"0\" y=\"{}\" width=\"10\" height=\"14\" fill=\"{}\"/>", y + 1,
          css_colour(device_colour(b.positions.front())));
    }
    put(out, "<text x=\"14\" y=\"{}\">{}</text>", y + 12,
        xml_escape(label.size() > 52 ? label.substr(0, 50) + "…" : label));
    uint64_t at = 0;
    for (const ByteKind* k : kinds) {
      const uint64_t v = b.bytes.*k->field;
      if (v == 0) continue;
      put(out,
          "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"14\" fill=\"{}\"><title>{}: {} "
          "{} ({} bytes)</title></rect>",
          x_of(at), y + 1, x_of(at + v) - x_of(at), k->colour, xml_escape(label), k->name,
          format_bytes(v), v);
      at += v;
    }
    if (b.bytes.peak > 0) {
      put(out,
          "<rect x=\"{:.2f}\" y=\"{}\" width=\"2\" height=\"18\" fill=\"#000\"><title>peak "
          "{}</title></rect>",
          x_of(b.bytes.peak) - 1, y - 1, format_bytes(b.bytes.peak));
    }
    put(out, "<text x=\"{:.2f}\" y=\"{}\">{}{}</text>", x_of(std::max(at, b.bytes.peak)) + 4,
        y + 12, format_bytes(std::max(at, b.bytes.peak)), b.bytes.fits ? "" : " (does not fit)");
  }
  if (o.device_memory) {
    put(out, "<rect x=\"{:.2f}\" y=\"0\" width=\"2\" height=\"{}\" fill=\"#d00\"/>",
        x_of(*o.device_memory) - 1, height);
  }
  out += "</svg></section>\n";
}

// --- issues ---------------------------------------------------------------------------------

// Issues whose messages differ only in numbers (the same warning for every layer) are one
// line: "uneven: tensor 'transformer_layer_{0–125}/…' … (126 warnings)".
void render_issues(const CheckpointPlan& plan, const PlanHtmlOptions& o, std::string& out) {
  for (PlanIssue::Severity severity :
       {PlanIssue::Severity::kError, PlanIssue::Severity::kWarning}) {
    const bool errors = severity == PlanIssue::Severity::kError;
    const size_t total = errors ? plan.num_errors : plan.num_warnings;
    put(out, "<section id=\"{0}\"><h2>{1} ({2})</h2>\n", errors ? "errors" : "warnings",
        errors ? "Errors" : "Warnings", total);
    if (total == 0) {
      out += "<p>None.</p></section>\n";
      continue;
    }
    std::vector<std::string> texts;
    for (const PlanIssue& issue : plan.issues) {
      if (issue.severity != severity) continue;
      texts.push_back(fmt::format("{}: {}", plan_issue_kind_name(issue.kind), issue.message));
    }
    const std::vector<NameGroup> groups =
        group_names(std::vector<std::string_view>(texts.begin(), texts.end()));
    if (groups.size() < texts.size()) {
      put(out,
          "<p class=\"note\">{} lines: {} that differ only in numbers (e.g. a layer index) "
          "are one line, each differing number shown as its set of values.</p>\n",
          groups.size(), errors ? "errors" : "warnings");
    }
    out += "<ul class=\"issues\">\n";
    for (size_t i = 0; i < groups.size() && i < o.max_issues; ++i) {
      const std::string& text = groups[i].text;
      const size_t colon = text.find(": ");
      put(out, "<li class=\"{}\"><b>{}</b>: {}{}</li>\n", errors ? "error" : "warning",
          xml_escape(text.substr(0, colon)), xml_escape(text.substr(colon + 2)),
          groups[i].count > 1
              ? fmt::format(" <i>({} {})</i>", groups[i].count, errors ? "errors" : "warnings")
              : "");
    }
    out += "</ul>\n";
    if (groups.size() > o.max_issues) {
      put(out,
          "<p class=\"note\">The first {} of {} lines are listed; the text output lists "
          "all.</p>\n",
          o.max_issues, groups.size());
    }
    out += "</section>\n";
  }
}

// --- layouts --------------------------------------------------------------------------------

struct Group {  // the tensors of one placement
  size_t placement = 0;
  std::vector<size_t> tensors;
  uint64_t bytes = 0;  // all of them
  size_t errors = 0;
};

std::optional<TensorLayout> placement_layout(const CheckpointPlan& plan, const Placement& p) {
  if (!p.rule) return TensorLayout(std::vector<DimSharding>(p.shape.size(), None), plan.mesh);
  TensorLayout layout = TensorLayout::from_string(plan.rules[*p.rule].layout_text);
  layout.set_device_mesh(plan.mesh);
  return layout;
}

std::string group_heading(const CheckpointPlan& plan, const Group& g, const PlanHtmlOptions& o,
                          std::string* list) {
  std::vector<std::string_view> names;
  names.reserve(g.tensors.size());
  for (size_t t : g.tensors) names.push_back(plan.tensors[t].info->name);
  const std::vector<NameGroup> groups = group_names(names);
  if (list) {
    *list += "<ul class=\"names\">";
    for (size_t i = 0; i < groups.size() && i < o.max_name_groups; ++i) {
      put(*list, "<li><code>{}</code>{}</li>", xml_escape(groups[i].text),
          groups[i].count > 1 ? fmt::format(" ({} tensors)", groups[i].count) : "");
    }
    if (groups.size() > o.max_name_groups) {
      put(*list, "<li>… and {} more groups of names</li>", groups.size() - o.max_name_groups);
    }
    *list += "</ul>";
  }
  return groups.front().text +
         (groups.size() > 1 ? fmt::format(" and {} more", g.tensors.size() - groups.front().count)
                            : "");
}

void render_layout_section(const CheckpointPlan& plan, const Group& g, size_t number,
                           const PlanHtmlOptions& o, std::string& out) {
  const Placement& p = plan.placements[g.placement];
  std::string names;
  const std::string heading = group_heading(plan, g, o, &names);
  put(out, "<details{} id=\"layout-{}\"><summary><b>{}</b> &mdash; {} {}, {}</summary>\n",
      number < 24 ? " open" : "", number, xml_escape(heading), plural(g.tensors.size(), "tensor"),
      shape_to_string(p.shape), format_bytes(g.bytes));
  const std::string layout_text = p.rule ? plan.rules[*p.rule].layout_text : "replicated";
  put(out, "<p>{}: shape {}, {} bytes an element; rule {}; <code>{}</code>",
      g.tensors.size() == 1 ? "1 tensor has this layout"
                            : fmt::format("{} tensors share this layout", g.tensors.size()),
      shape_to_string(p.shape), p.element_size,
      p.rule ? fmt::format("#{} <code>{}</code>", *p.rule, xml_escape(plan.rules[*p.rule].pattern))
             : std::string("none (held whole by every device)"),
      xml_escape(layout_text));
  if (p.fits) {
    put(out, "; largest box {} ({}), {} cop{} of each box", shape_to_string(p.shard_shape),
        format_bytes(p.shard_bytes), p.num_replicas, p.num_replicas == 1 ? "y" : "ies");
  }
  if (!p.uneven.empty()) out += "; <b>uneven split</b>";
  if (g.errors) put(out, "; <b>{} with errors</b>", plural(g.errors, "tensor"));
  out += ".</p>\n" + names + "\n";
  std::optional<LayoutDrawing> drawing;
  std::string why;
  if (!p.fits) {
    why = "the layout's rank differs from the tensor's";
  } else {
    try {
      LayoutDrawOptions draw = o.draw;
      draw.id_prefix = fmt::format("p{}", number);
      drawing = draw_layout(ShardGeometry(*placement_layout(plan, p), p.shape), draw);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  if (!drawing) {
    put(out, "<p class=\"note\">Not drawn: {}.</p></details>\n", xml_escape(why));
    return;
  }
  if (!drawing->notes.empty()) {
    out += "<ul class=\"notes\">";
    for (const std::string& note : drawing->notes) put(out, "<li>{}</li>", xml_escape(note));
    out += "</ul>\n";
  }
  put(out,
      "<div class=\"pics\"><figure>{}<figcaption>the tensor cut into boxes</figcaption></figure>"
      "<figure>{}<figcaption>the mesh: the box each device "
      "holds</figcaption></figure></div>\n</details>\n",
      drawing->tensor_svg, drawing->mesh_svg);
}

constexpr const char* kStyle = R"(
body{font-family:system-ui,sans-serif;margin:16px 24px;color:#111;background:#fff}
h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #ccc}
code{font-size:12px}.note,.notes{color:#444;font-size:13px}li.error{color:#a00}
details{margin:8px 0 14px;border-left:3px solid #ddd;padding-left:10px}summary{cursor:pointer}
.pics{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}figure{margin:0}
figcaption{font-size:12px;color:#555}.legend span{margin-right:14px;font-size:13px}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
)";

constexpr const char* kScript = R"(
(function () {
  var n = document.querySelectorAll('svg').length;
  document.getElementById('status').textContent = n + ' pictures';
  document.documentElement.setAttribute('data-meshlayout-rendered', 'ok');
})();
)";

}  // namespace

std::vector<DeviceMemoryPlan> memory_from_plan(const CheckpointPlan& plan) {
  std::vector<DeviceMemoryPlan> out(plan.device_bytes.size());
  for (size_t d = 0; d < out.size(); ++d) out[d].weights = plan.device_bytes[d];
  return out;
}

std::vector<DeviceMemoryPlan> memory_from_training(const TrainingPlan& training) {
  std::vector<DeviceMemoryPlan> out(training.devices.size());
  for (size_t d = 0; d < out.size(); ++d) {
    out[d].weights = training.devices[d].weights;
    out[d].gradients = training.devices[d].gradients;
    out[d].slots = training.devices[d].slots;
  }
  return out;
}

std::string render_plan_html(const CheckpointPlan& plan, const PlanHtmlOptions& o) {
  const DeviceMesh& mesh = plan.mesh;
  const int64_t n = mesh.size();
  const std::vector<DeviceMemoryPlan> memory = o.memory.empty() ? memory_from_plan(plan) : o.memory;
  if (static_cast<int64_t>(memory.size()) != n) {
    throw ValueError(fmt::format("the page's memory plan has {} devices; the mesh {} has {}",
                                 memory.size(), mesh.to_string(), n));
  }
  // The layouts, in the order of their first tensor.
  std::vector<Group> groups;
  std::vector<size_t> group_of(plan.placements.size(), SIZE_MAX);
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const PlannedTensor& tensor = plan.tensors[t];
    if (!tensor.placement) continue;
    size_t& g = group_of[*tensor.placement];
    if (g == SIZE_MAX) {
      g = groups.size();
      groups.push_back({*tensor.placement, {}, 0, 0});
    }
    groups[g].tensors.push_back(t);
    groups[g].bytes += tensor.info->num_bytes();
    groups[g].errors += !tensor.ok();
  }
  // Pictures for the largest layouts, up to max_pictures.
  std::vector<size_t> by_bytes(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) by_bytes[i] = i;
  std::stable_sort(by_bytes.begin(), by_bytes.end(),
                   [&](size_t a, size_t b) { return groups[a].bytes > groups[b].bytes; });
  std::vector<bool> drawn(groups.size(), false);
  for (size_t i = 0; i < by_bytes.size() && i < o.max_pictures; ++i) drawn[by_bytes[i]] = true;

  std::string out;
  out.reserve(size_t{1} << 20);
  const std::string title =
      fmt::format("meshlayout plan{}{}", plan.source.empty() ? "" : " of ", plan.source);
  put(out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n",
      xml_escape(title));
  if (n <= o.draw.max_device_cells) {
    out += "<meta name=\"meshlayout-device-colours\" content=\"";
    for (int64_t p = 0; p < n; ++p) put(out, "{}{}", p ? "," : "", css_colour(device_colour(p)));
    out += "\">\n";
  }
  put(out, "<style>{}</style></head>\n<body>\n<h1>{}</h1>\n", kStyle, xml_escape(title));
  uint64_t most = 0;
  for (uint64_t b : plan.device_bytes) most = std::max(most, b);
  put(out,
      "<p>{} ({}) on {} ({}), mode {}{}. {} distinct layouts; {} sharded, {} replicated. The "
      "most weights a device holds: {}. <b>{}</b>: {}, {}. <span id=\"status\"></span></p>\n",
      plural(plan.tensors.size(), "tensor"), format_bytes(plan.total_bytes),
      xml_escape(mesh.to_string()), plural(static_cast<size_t>(n), "device"),
      match_mode_name(plan.mode), plan.options.strict ? ", strict" : "", groups.size(),
      plan.num_sharded, plan.num_replicated, format_bytes(most),
      plan.ok() ? "plan OK" : "plan has errors", plural(plan.num_errors, "error"),
      plural(plan.num_warnings, "warning"));
  std::vector<std::string> notes = o.notes;
  if (n > o.draw.max_device_cells) {
    notes.push_back(fmt::format(
        "{} devices: each mesh is drawn as a heatmap coloured by the box a device holds, not "
        "with a colour per device (up to {} devices are drawn one by one)",
        n, o.draw.max_device_cells));
  }
  if (n > o.max_bars) {
    notes.push_back("devices holding the same bytes of every kind share one bar");
  }
  notes.push_back(
      "tensors with the same rule, shape and element size share one layout and are drawn once; "
      "their names are grouped, each number that differs shown as its set of values");
  out += "<ul class=\"notes\">";
  for (const std::string& note : notes) put(out, "<li>{}</li>", xml_escape(note));
  out += "</ul>\n";

  render_issues(plan, o, out);
  render_bars(plan, o, memory, out);

  put(out, "<section id=\"layouts\"><h2>Layouts ({})</h2>\n", groups.size());
  std::vector<size_t> table;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (drawn[i] && out.size() < o.max_page_bytes) {
      render_layout_section(plan, groups[i], i, o, out);
    } else {
      table.push_back(i);
    }
  }
  if (!table.empty()) {
    put(out,
        "<p class=\"note\">{} layouts are not drawn (pictures are drawn for the {} largest, "
        "until the page reaches {}){}:</p>\n<table><tr><th>tensors</th><th>shape</th>"
        "<th>layout</th><th>bytes</th></tr>\n",
        table.size(), o.max_pictures, format_bytes(o.max_page_bytes),
        table.size() > o.max_table_rows ? fmt::format("; the first {} listed", o.max_table_rows)
                                        : "");
    for (size_t k = 0; k < table.size() && k < o.max_table_rows; ++k) {
      const Group& g = groups[table[k]];
      const Placement& p = plan.placements[g.placement];
      put(out, "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
          xml_escape(group_heading(plan, g, o, nullptr)), shape_to_string(p.shape),
          xml_escape(p.rule ? plan.rules[*p.rule].layout_text : "replicated"),
          format_bytes(g.bytes));
    }
    out += "</table>\n";
  }
  out += "</section>\n";
  put(out, "<script>{}</script>\n</body></html>\n", kScript);
  return out;
}

}  // namespace meshlayout
