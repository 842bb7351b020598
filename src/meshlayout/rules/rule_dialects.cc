#include "meshlayout/rules/rule_dialects.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/rules/rules_internal.h"

namespace meshlayout {
namespace rules_internal {

[[noreturn]] void fail(std::string_view source, const std::string& where, const std::string& what) {
  throw ValueError(fmt::format("{} {}: {}", source, where, what));
}

std::string type_of(const ojson& j) {
  if (j.is_null()) return "null";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  if (j.is_object()) return "an object";
  if (j.is_boolean()) return "a boolean";
  return "a number";
}

std::string excerpt(const ojson& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

ojson layout_json(const Layout& layout) {
  ojson out = ojson::array();
  for (const DimSharding& d : layout) {
    if (!d.is_sharded()) {
      out.push_back(nullptr);
    } else if (d.axes().size() == 1) {
      out.push_back(d.axes()[0]);
    } else {
      out.push_back(d.axes());
    }
  }
  return out;
}

// JSON with ", " between items, as the rules files in examples/rules are written.
std::string spaced_json(const ojson& j) {
  if (!j.is_array()) return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out = "[";
  for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + spaced_json(j[i]);
  return out + "]";
}

std::string layout_text(const Layout& layout) { return spaced_json(layout_json(layout)); }

// null, an axis name, or a list of axis names (an empty list: not split).
DimSharding parse_dim(const ojson& e, std::string_view source, const std::string& where) {
  if (e.is_null()) return DimSharding();
  if (e.is_string()) {
    if (e.get<std::string>().empty()) fail(source, where, "an empty mesh axis name");
    return DimSharding(e.get<std::string>());
  }
  if (e.is_array()) {
    std::vector<std::string> axes;
    for (const ojson& a : e) {
      if (!a.is_string() || a.get<std::string>().empty()) {
        fail(source, where,
             fmt::format("a list of mesh axes must hold axis names, got {} {}", type_of(a),
                         excerpt(a)));
      }
      axes.push_back(a.get<std::string>());
    }
    return DimSharding(std::move(axes));
  }
  fail(source, where,
       fmt::format("must be null, a mesh axis name or a list of them, got {} {}", type_of(e),
                   excerpt(e)));
}

Layout parse_layout(const ojson& j, std::string_view source, const std::string& where) {
  if (!j.is_array()) {
    fail(source, where,
         fmt::format("the layout must be a list (one entry per dimension), got {} {}", type_of(j),
                     excerpt(j)));
  }
  Layout out;
  for (size_t d = 0; d < j.size(); ++d) {
    out.push_back(parse_dim(j[d], source, fmt::format("{}, dimension {}", where, d)));
  }
  return out;
}

// A mesh axis at most once per layout; axes of `mesh` when given.
void check_layout(const ConvertedRule& rule, const std::optional<DeviceMesh>& mesh) {
  std::map<std::string, size_t> seen;
  for (size_t d = 0; d < rule.layout.size(); ++d) {
    for (const std::string& axis : rule.layout[d].axes()) {
      auto [it, fresh] = seen.emplace(axis, d);
      if (!fresh) {
        throw ValueError(fmt::format(
            "rule {}: mesh axis {} is used twice for one tensor (dimensions {} and {} of "
            "layout {}); a mesh axis splits at most one dimension of a tensor",
            rule.origin, quote(axis), it->second, d, layout_text(rule.layout)));
      }
      if (mesh) {
        const auto& names = mesh->axis_names();
        if (std::find(names.begin(), names.end(), axis) == names.end()) {
          throw ValueError(fmt::format("rule {}: mesh axis {} is not an axis of the mesh ({})",
                                       rule.origin, quote(axis), fmt::join(names, ", ")));
        }
      }
    }
  }
}

ojson parse_json_ordered(std::string_view text, std::string_view source) {
  try {
    (void)parse_json_checked(text);  // depth limit, duplicate keys
    return ojson::parse(text);
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("{}: {}", source, e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
}

std::optional<GlobForm> glob_form(std::string_view p) {
  GlobForm out;
  bool start = false, end = false;
  if (p.starts_with('^')) {
    start = true;
    p.remove_prefix(1);
  }
  if (p.ends_with('$') && !(p.size() >= 2 && p[p.size() - 2] == '\\')) {
    end = true;
    p.remove_suffix(1);
  }
  out.anchored = start && end;
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (p.substr(i).starts_with("\\d+")) {
      out.glob += '*';
      i += 3;
    } else if (p.substr(i).starts_with("[0-9]+")) {
      out.glob += '*';
      i += 6;
    } else if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (std::isalnum(static_cast<unsigned char>(e)) || e == '*') return std::nullopt;
      out.glob += e;
      i += 2;
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == '-' ||
               c == ':' || c == ',' || c == '=' || c == '@' || c == '%' || c == '#' || c == ' ' ||
               c == '\'' || c == '"' || c == '<' || c == '>' || c == '&' || c == '~' || c == ';' ||
               c == '!') {
      out.glob += c;
      ++i;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// The glob of a rule where a glob is needed: an error naming the rule when it has regex
// features; a warning when an unanchored search-mode pattern becomes an exact path.
std::string rule_glob(const ConvertedRule& rule, MatchMode mode, std::string_view target,
                      std::vector<std::string>& warnings) {
  std::optional<GlobForm> g = glob_form(rule.pattern);
  if (!g) {
    throw ValueError(fmt::format(
        "rule {}: pattern {} uses regex features (., *, +, ?, |, (), [], {{}}, \\w …) that {} "
        "cannot express: its keys are paths where '*' stands for a run of digits only",
        rule.origin, quote(rule.pattern), target));
  }
  if (!g->anchored && mode == MatchMode::kSearch) {
    warnings.push_back(fmt::format(
        "rule {}: pattern {} is not anchored (^…$), so in search mode it matches every path "
        "containing it; {} keys are exact paths: written as {}",
        rule.origin, quote(rule.pattern), target, quote(g->glob)));
  } else if (!g->anchored && mode == MatchMode::kFirst && !rule.pattern.ends_with('$')) {
    warnings.push_back(fmt::format(
        "rule {}: pattern {} matches every path starting with it (mode first); {} keys are "
        "exact paths: written as {}",
        rule.origin, quote(rule.pattern), target, quote(g->glob)));
  }
  return g->glob;
}

const HfNameMap& name_map_of(const ConvertOptions& options) {
  return options.name_map ? *options.name_map : hf_name_map(options.family);
}

std::string replace_stars(std::string_view glob, int64_t index) {
  std::string out;
  for (char c : glob) {
    if (c == '*') {
      out += std::to_string(index);
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<int64_t> checked_layers(const ConvertOptions& options) {
  if (!options.layer_indices.empty()) return options.layer_indices;
  return {0, 1, 2, 3, 7, 31};
}

RuleSet expand_to_globs(const RuleSet& rules, const ConvertOptions& options,
                        std::string_view target, std::vector<std::string>& warnings) {
  std::vector<bool> is_glob;
  bool all = true;
  for (const ConvertedRule& r : rules.rules) {
    is_glob.push_back(glob_form(r.pattern).has_value());
    all = all && is_glob.back();
  }
  if (all) return rules;
  const HfNameMap* map = nullptr;
  try {
    map = &name_map_of(options);
  } catch (const ValueError&) {
    map = nullptr;  // no family map: the rule's own error below
  }
  const LayoutMap layout_map = rules.to_layout_map();
  const std::vector<int64_t> layers = checked_layers(options);
  std::vector<std::vector<std::pair<std::string, int>>> expansions(rules.rules.size());
  auto describe = [&](std::optional<size_t> i) {
    return i ? fmt::format("rule {}", rules.rules[*i].origin) : std::string("no rule");
  };
  if (map) {
    for (const HfParamName& p : map->params()) {
      std::vector<std::pair<std::string, int>> globs{{p.hf_glob, p.hf_rank()}};
      for (const std::string& k : p.keras_globs) globs.emplace(globs.end() - 1, k, p.keras_rank());
      for (const auto& [glob, rank] : globs) {
        const bool per_layer = glob.find('*') != std::string::npos;
        std::optional<size_t> first;
        std::string first_path;
        for (int64_t layer : per_layer ? layers : std::vector<int64_t>{0}) {
          const std::string path = replace_stars(glob, layer);
          std::optional<size_t> index;
          try {
            index = layout_map.match_index(path);
          } catch (const ValueError& e) {
            throw ValueError(fmt::format("variable {}: {}", quote(path), e.what()));
          }
          if (first_path.empty()) {
            first = index;
            first_path = path;
          } else if (index != first &&
                     ((first && !is_glob[*first]) || (index && !is_glob[*index]))) {
            throw ValueError(fmt::format(
                "{} is decided by {} but {} by {}; {} gives every layer of {} one entry",
                quote(first_path), describe(first), quote(path), describe(index), target,
                quote(glob)));
          }
        }
        if (first && !is_glob[*first]) expansions[*first].emplace_back(glob, rank);
      }
    }
  }
  RuleSet out = rules;
  out.rules.clear();
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    const ConvertedRule& r = rules.rules[i];
    if (is_glob[i]) {
      out.rules.push_back(r);
      continue;
    }
    if (expansions[i].empty()) {
      if (!map) (void)rule_glob(r, rules.mode, target, warnings);  // its own error
      throw ValueError(fmt::format(
          "rule {}: pattern {} uses regex features that {} cannot express, and it decides no "
          "variable of the {} family's name map (layers checked: {}) to write in its place",
          r.origin, quote(r.pattern), target, map->family(), fmt::join(layers, ", ")));
    }
    std::vector<std::string> globs;
    for (const auto& [glob, rank] : expansions[i]) {
      if (static_cast<int>(r.layout.size()) != rank) {
        throw ValueError(fmt::format("rule {}: layout {} has {} dimensions but {} has {}", r.origin,
                                     layout_text(r.layout), r.layout.size(), quote(glob), rank));
      }
      ConvertedRule e = r;
      e.pattern = glob_to_regex(glob);
      e.origin = fmt::format("{} as {}", r.origin, quote(glob));
      out.rules.push_back(std::move(e));
      globs.push_back(quote(glob));
    }
    warnings.push_back(fmt::format(
        "rule {}: pattern {} is no path for {}: written as the {} variable{} of the {} family's "
        "name map it decides ({}); other paths it matches are not kept",
        r.origin, quote(r.pattern), target, globs.size(), globs.size() == 1 ? "" : "s",
        map->family(), fmt::join(globs, ", ")));
  }
  return out;
}

}  // namespace rules_internal

using namespace rules_internal;  // NOLINT(google-build-using-namespace): this file's own helpers

RulesDialect parse_rules_dialect(std::string_view name) {
  if (name == "meshlayout") return RulesDialect::kMeshlayout;
  if (name == "keras-hub") return RulesDialect::kKerasHub;
  if (name == "hf-tp-plan") return RulesDialect::kHfTpPlan;
  if (name == "maxtext") return RulesDialect::kMaxText;
  throw ValueError(
      fmt::format("unknown rules dialect {}; expected meshlayout, keras-hub, hf-tp-plan or maxtext",
                  quote(name)));
}

std::string_view rules_dialect_name(RulesDialect dialect) {
  switch (dialect) {
    case RulesDialect::kMeshlayout:
      return "meshlayout";
    case RulesDialect::kKerasHub:
      return "keras-hub";
    case RulesDialect::kHfTpPlan:
      return "hf-tp-plan";
    case RulesDialect::kMaxText:
      return "maxtext";
  }
  return "?";
}

LayoutMap RuleSet::to_layout_map() const {
  LayoutMap map(mesh, mode);
  for (const ConvertedRule& r : rules) {
    try {
      map.set(r.pattern, TensorLayout(r.layout));
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("rule {}: {}", r.origin, e.what()));
    }
  }
  return map;
}

RuleSet RuleSet::from_layout_map(const LayoutMap& map) {
  RuleSet out;
  out.mesh = map.device_mesh();
  out.mode = map.mode();
  for (size_t i = 0; i < map.size(); ++i) {
    const LayoutRule& r = map.rule(i);
    out.rules.push_back(ConvertedRule{.pattern = r.pattern,
                                      .layout = r.layout.axes(),
                                      .origin = fmt::format("{} ({})", i, quote(r.pattern))});
  }
  return out;
}

RuleSet read_rules(std::string_view text, RulesDialect dialect, const ConvertOptions& options,
                   std::string_view source) {
  RuleSet out;
  switch (dialect) {
    case RulesDialect::kMeshlayout:
      out = read_meshlayout(text, options, source);
      break;
    case RulesDialect::kKerasHub:
      out = read_keras_hub(text, options, source);
      break;
    case RulesDialect::kHfTpPlan:
      out = read_hf(text, options, source);
      break;
    case RulesDialect::kMaxText:
      out = read_maxtext(text, options, source);
      break;
  }
  if (options.mesh) out.mesh = options.mesh;
  (void)out.to_layout_map();  // every pattern compiles, no key twice
  return out;
}

std::string write_rules(const RuleSet& rules, RulesDialect dialect, const ConvertOptions& options,
                        std::vector<std::string>* warnings) {
  std::vector<std::string> local;
  std::string out;
  switch (dialect) {
    case RulesDialect::kMeshlayout: {
      warn_dropped_activation_semantics(rules, dialect, local);
      out = "{\n";
      const std::optional<DeviceMesh>& mesh = options.mesh ? options.mesh : rules.mesh;
      if (mesh) {
        out +=
            fmt::format("  \"mesh\": {{\"shape\": {}, \"axis_names\": {}}},\n",
                        spaced_json(ojson(mesh->shape())), spaced_json(ojson(mesh->axis_names())));
      }
      out += fmt::format("  \"mode\": \"{}\",\n  \"rules\": [\n", match_mode_name(rules.mode));
      out += rules_lines(rules, false) + "  ]\n}\n";
      break;
    }
    case RulesDialect::kKerasHub:
      warn_dropped_activation_semantics(rules, dialect, local);
      if (rules.mode != MatchMode::kSearch) {
        local.push_back(fmt::format(
            "the rules' match mode is {}; keras-hub's layout maps are looked up in Keras' mode "
            "(search before Keras 3.14, fullmatch from 3.14)",
            match_mode_name(rules.mode)));
      }
      out = "{\n" + rules_lines(rules, true) + "}\n";
      break;
    case RulesDialect::kHfTpPlan:
      out = write_hf(rules, options, local);
      break;
    case RulesDialect::kMaxText:
      warn_dropped_activation_semantics(rules, dialect, local);
      out = write_maxtext(rules, options, local);
      break;
  }
  if (warnings) warnings->insert(warnings->end(), local.begin(), local.end());
  return out;
}

std::string convert_rules(std::string_view text, RulesDialect from, RulesDialect to,
                          ConvertOptions options, std::string_view source,
                          std::vector<std::string>* warnings) {
  if (!options.names) {
    options.names = (from == RulesDialect::kKerasHub || to == RulesDialect::kKerasHub)
                        ? HfNames::kKerasHub
                        : HfNames::kHf;
  }
  RuleSet rules = read_rules(text, from, options, source);
  if (warnings) warnings->insert(warnings->end(), rules.warnings.begin(), rules.warnings.end());
  return write_rules(rules, to, options, warnings);
}

void use_model_config(ConvertOptions& options, const LlamaConfig& config) {
  options.family = config.family;
  options.model_mappings = hf_llama_weight_mappings(config);
  options.name_map = std::make_shared<const HfNameMap>(
      hf_name_map_from_mappings(config.family, options.model_mappings));
  options.layer_indices.clear();
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) options.layer_indices.push_back(i);
}

std::optional<std::string> regex_to_glob(std::string_view pattern) {
  std::optional<GlobForm> g = glob_form(pattern);
  if (!g) return std::nullopt;
  return g->glob;
}

std::string glob_to_regex(std::string_view glob) {
  std::string out = "^";
  for (char c : glob) {
    if (c == '*') {
      out += "\\d+";
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == '-') {
      out += c;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out + "$";
}

}  // namespace meshlayout
