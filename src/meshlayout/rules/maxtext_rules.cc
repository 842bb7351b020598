#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/rules/rules_internal.h"
#include "meshlayout/rules/yaml_subset.h"

// Flax/MaxText logical axis rules (rule_dialects.h says what they mean).
namespace meshlayout::rules_internal {
namespace {

using LogicalRules = std::vector<std::pair<std::string, std::vector<std::string>>>;
using LogicalNames = std::vector<std::optional<std::string>>;

// Flax's logical_to_mesh_axes for one tensor. Notes skipped rules in `warnings`.
Layout flax_resolve(const LogicalNames& names, const LogicalRules& rules, const std::string& tensor,
                    std::vector<std::string>* warnings) {
  Layout out(names.size());
  std::vector<bool> assigned(names.size(), false);
  std::set<std::string> used;
  std::vector<std::string> skipped(names.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    const auto& [name, axes] = rules[r];
    auto it = std::find(names.begin(), names.end(), std::optional<std::string>(name));
    if (it == names.end()) continue;
    const size_t pos = static_cast<size_t>(it - names.begin());
    if (assigned[pos]) continue;
    bool free = true;
    for (const std::string& a : axes) free = free && !used.contains(a);
    if (!free) {
      if (skipped[pos].empty()) {
        skipped[pos] = fmt::format(
            "logical_axis_rules[{}] ({} -> {}) was skipped: {} already splits another "
            "dimension of this tensor",
            r, name, fmt::join(axes, ", "),
            axes.size() == 1 ? quote(axes[0]) : fmt::format("one of {}", fmt::join(axes, ", ")));
      }
      continue;
    }
    assigned[pos] = true;
    for (const std::string& a : axes) used.insert(a);
    out[pos] = axes.empty() ? DimSharding() : DimSharding(axes);
  }
  if (warnings) {
    for (size_t d = 0; d < names.size(); ++d) {
      if (!assigned[d] && !skipped[d].empty()) {
        warnings->push_back(fmt::format("logical_axes {}: dimension {} ({}) is not split: {}",
                                        quote(tensor), d, *names[d], skipped[d]));
      }
    }
  }
  return out;
}

}  // namespace

RuleSet read_maxtext(std::string_view text, const ConvertOptions& options,
                     std::string_view source) {
  ojson root = parse_yaml_subset(text, source);
  if (!root.is_object()) {
    fail(source, "top level",
         "must be a mapping with logical_axis_rules and logical_axes, got " + type_of(root));
  }
  // A MaxText config holds its other settings beside the rules: named, not read.
  std::vector<std::string> ignored;
  for (const auto& [key, value] : root.items()) {
    if (key != "logical_axis_rules" && key != "logical_axes" && key != "mesh_axes") {
      ignored.push_back(quote(key));
    }
  }
  for (const char* k : {"logical_axis_rules", "logical_axes"}) {
    if (!root.contains(k)) fail(source, "top level", fmt::format("has no {}", k));
  }
  std::optional<std::vector<std::string>> mesh_axes;
  if (root.contains("mesh_axes")) {
    const ojson& m = root["mesh_axes"];
    if (!m.is_array()) fail(source, "mesh_axes", "must be a list of mesh axis names");
    mesh_axes.emplace();
    for (const ojson& a : m) {
      if (!a.is_string()) fail(source, "mesh_axes", "must be a list of mesh axis names");
      mesh_axes->push_back(a.get<std::string>());
    }
  }
  const ojson& jr = root["logical_axis_rules"];
  if (!jr.is_array()) {
    fail(source, "logical_axis_rules",
         "must be a list of [logical name, mesh axes] pairs, got " + type_of(jr));
  }
  LogicalRules rules;
  std::set<std::string> mapped;
  for (size_t i = 0; i < jr.size(); ++i) {
    const std::string where = fmt::format("logical_axis_rules[{}]", i);
    const ojson& r = jr[i];
    if (!r.is_array() || r.size() != 2 || !r[0].is_string()) {
      fail(source, where,
           fmt::format("must be a [logical name, mesh axes] pair, got {}", excerpt(r)));
    }
    DimSharding d = parse_dim(r[1], source, where);
    std::set<std::string> seen;
    for (const std::string& a : d.axes()) {
      if (!seen.insert(a).second) {
        fail(source, where,
             fmt::format("mesh axis {} is listed twice; a mesh axis splits a dimension once",
                         quote(a)));
      }
      if (mesh_axes && std::find(mesh_axes->begin(), mesh_axes->end(), a) == mesh_axes->end()) {
        fail(source, where,
             fmt::format("mesh axis {} is not in mesh_axes ({})", quote(a),
                         fmt::join(*mesh_axes, ", ")));
      }
    }
    rules.emplace_back(r[0].get<std::string>(), d.axes());
    mapped.insert(r[0].get<std::string>());
  }
  const ojson& ja = root["logical_axes"];
  if (!ja.is_object()) {
    fail(source, "logical_axes",
         "must be a mapping from parameter path to its logical axis names, got " + type_of(ja));
  }
  RuleSet out;
  if (!ignored.empty()) {
    const size_t shown = std::min<size_t>(ignored.size(), 8);
    out.warnings.push_back(fmt::format(
        "keys other than logical_axis_rules, logical_axes and mesh_axes are not read: {}{}",
        fmt::join(ignored.begin(), ignored.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        ignored.size() > shown ? fmt::format(" and {} more", ignored.size() - shown) : ""));
  }
  out.logical_axis_rules = rules;
  out.mesh_axes = mesh_axes;
  for (const auto& [path, names_json] : ja.items()) {
    const std::string where = fmt::format("logical_axes {}", quote(path));
    if (path.empty()) fail(source, where, "an empty parameter path");
    if (!names_json.is_array()) {
      fail(source, where,
           fmt::format("must be a list of logical axis names (null: none), got {} {}",
                       type_of(names_json), excerpt(names_json)));
    }
    LogicalNames names;
    for (size_t d = 0; d < names_json.size(); ++d) {
      const ojson& n = names_json[d];
      if (n.is_null()) {
        names.emplace_back();
      } else if (n.is_string()) {
        if (!mapped.contains(n.get<std::string>())) {
          fail(source, where,
               fmt::format("logical name {} (dimension {}) appears in no logical_axis_rules "
                           "entry; add a rule for it (['{}', null] to keep it whole)",
                           quote(n.get<std::string>()), d, n.get<std::string>()));
        }
        for (size_t e = 0; e < names.size(); ++e) {
          if (names[e] == n.get<std::string>()) {
            fail(source, where,
                 fmt::format("logical name {} names dimensions {} and {}; Flax refuses a logical "
                             "name used twice in one tensor",
                             quote(n.get<std::string>()), e, d));
          }
        }
        names.emplace_back(n.get<std::string>());
      } else {
        fail(source, where,
             fmt::format("dimension {}: a logical axis name must be a string or null, got {}", d,
                         excerpt(n)));
      }
    }
    ConvertedRule rule{.pattern = glob_to_regex(path),
                       .layout = flax_resolve(names, rules, path, &out.warnings),
                       .origin = fmt::format("{} {}", source, where),
                       .logical_axes = names};
    check_layout(rule, options.mesh);
    out.rules.push_back(std::move(rule));
  }
  for (std::string& w : out.warnings) w = fmt::format("{}: {}", source, w);
  return out;
}

std::string write_maxtext(const RuleSet& read, const ConvertOptions& options,
                          std::vector<std::string>& warnings) {
  bool carried = read.logical_axis_rules.has_value();
  for (const ConvertedRule& r : read.rules) carried = carried && r.logical_axes.has_value();
  // Regex rules become the name map's variables they decide (MaxText keys are paths).
  const RuleSet rules =
      carried ? read : expand_to_globs(read, options, "MaxText's logical_axes", warnings);
  ojson root = ojson::object();
  const std::optional<DeviceMesh>& mesh = options.mesh ? options.mesh : rules.mesh;
  if (mesh) {
    root["mesh_axes"] = mesh->axis_names();
  } else if (rules.mesh_axes) {
    root["mesh_axes"] = *rules.mesh_axes;
  }
  LogicalRules logical;
  std::vector<LogicalNames> names(rules.rules.size());
  if (carried) {
    logical = *rules.logical_axis_rules;
    for (size_t i = 0; i < rules.rules.size(); ++i) {
      const ConvertedRule& r = rules.rules[i];
      names[i] = *r.logical_axes;
      if (flax_resolve(names[i], logical, r.pattern, nullptr) != r.layout) {
        throw ValueError(fmt::format(
            "rule {}: layout {} is no longer what its logical names give under the rules read",
            r.origin, layout_text(r.layout)));
      }
    }
  } else {
    // One logical name per distinct split: the axes joined by '_', unsplit dimensions null.
    for (size_t i = 0; i < rules.rules.size(); ++i) {
      for (const DimSharding& d : rules.rules[i].layout) {
        if (!d.is_sharded()) {
          names[i].emplace_back();
          continue;
        }
        std::string name = fmt::format("{}", fmt::join(d.axes(), "_"));
        bool known = false;
        for (const auto& [n, axes] : logical) {
          if (n == name) {
            known = true;
            if (axes != d.axes()) {
              throw ValueError(
                  fmt::format("rule {}: logical name {} would stand for two different splits",
                              rules.rules[i].origin, quote(name)));
            }
          }
        }
        if (!known) logical.emplace_back(name, d.axes());
        names[i].emplace_back(name);
      }
    }
  }
  ojson jr = ojson::array();
  for (const auto& [n, axes] : logical) {
    ojson a = axes.empty() ? ojson(nullptr) : axes.size() == 1 ? ojson(axes[0]) : ojson(axes);
    jr.push_back(ojson::array({n, a}));
  }
  root["logical_axis_rules"] = jr;
  ojson ja = ojson::object();
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    const ConvertedRule& r = rules.rules[i];
    const std::string path = rule_glob(r, rules.mode, "MaxText's logical_axes", warnings);
    if (ja.contains(path)) {
      throw ValueError(fmt::format("rule {}: path {} is given twice", r.origin, quote(path)));
    }
    ojson n = ojson::array();
    for (const auto& x : names[i]) n.push_back(x ? ojson(*x) : ojson(nullptr));
    ja[path] = n;
  }
  root["logical_axes"] = ja;
  std::string out = "# Flax/MaxText logical axis rules (meshlayout rules convert)\n";
  return out + write_yaml_subset(root);
}

}  // namespace meshlayout::rules_internal
