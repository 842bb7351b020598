#include "meshlayout/rules/rule_dialects.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/rules/hf_name_map.h"
#include "meshlayout/rules/yaml_subset.h"

namespace meshlayout {
namespace {

using ojson = nlohmann::ordered_json;
using Layout = std::vector<DimSharding>;

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

// ---------------------------------------------------------------- Hugging Face styles

struct HfStyle {
  std::string_view name;
  enum Kind { kColwise, kRowwise, kReplicated } kind;
  bool activation_semantics;  // the style says more than its parameters' layouts
  std::string_view note;      // a warning when read, or empty
};

constexpr HfStyle kHfStyles[] = {
    {"colwise", HfStyle::kColwise, false, ""},
    {"rowwise", HfStyle::kRowwise, false, ""},
    {"colwise_rep", HfStyle::kColwise, true, ""},
    {"rowwise_rep", HfStyle::kRowwise, true, ""},
    {"local_colwise", HfStyle::kColwise, true, ""},
    {"local_rowwise", HfStyle::kRowwise, true, ""},
    {"replicate", HfStyle::kReplicated, false, ""},
    {"sequence_parallel", HfStyle::kReplicated, true, ""},
    {"replicated_with_grad_allreduce", HfStyle::kReplicated, true, ""},
    {"gather", HfStyle::kReplicated, true, ""},
    {"local", HfStyle::kReplicated, true,
     "Hugging Face's IsolatedParallel divides these parameters by the mesh size; a layout map "
     "keeps them whole, replicated"},
};

constexpr std::string_view kUnsupportedHfStyles[] = {
    "local_packed_rowwise", "packed_colwise", "packed_rowwise", "local_packed_colwise",
    "grouped_gemm",         "ep_router",      "moe_tp_experts", "colwise_gather_output",
    "rowwise_split_input",  "mla_kv_a_proj"};

const HfStyle* find_style(std::string_view name) {
  for (const HfStyle& s : kHfStyles) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string known_styles() {
  std::vector<std::string_view> names;
  for (const HfStyle& s : kHfStyles) names.push_back(s.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// The HF dimension a style splits on a parameter of `rank` (std::nullopt: not split).
std::optional<int> style_split(const HfStyle& style, bool bias, int rank) {
  if (style.kind == HfStyle::kReplicated) return std::nullopt;
  if (bias) {
    if (style.kind == HfStyle::kRowwise) return std::nullopt;
    return rank - 1;
  }
  return style.kind == HfStyle::kColwise ? rank - 2 : rank - 1;
}

bool valid_hf_key(std::string_view key) {
  if (key.empty() || key.front() == '.' || key.back() == '.') return false;
  for (char c : key) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '*') {
      return false;
    }
  }
  return key.find("..") == std::string_view::npos;
}

// "layers.*.mlp.up_proj" → "model.layers.*.mlp.up_proj"; "lm_head" and "model.…" unchanged.
std::string full_module(std::string_view key) {
  if (key == "lm_head" || key.starts_with("lm_head.") || key.starts_with("model.")) {
    return std::string(key);
  }
  return "model." + std::string(key);
}

// The inverse; std::nullopt for a module that reads back as another.
std::optional<std::string> plan_key(std::string_view module) {
  if (module.starts_with("model.")) return std::string(module.substr(6));
  if (module == "lm_head" || module.starts_with("lm_head.")) return std::string(module);
  return std::nullopt;
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

const HfNameMap& name_map_of(const ConvertOptions& options) {
  return options.name_map ? *options.name_map : hf_name_map(options.family);
}

RuleSet read_hf(std::string_view text, const ConvertOptions& options, std::string_view source) {
  ojson root = parse_json_ordered(text, source);
  if (!root.is_object()) {
    fail(source, "top level",
         "must be an object {module: style} (a base_model_tp_plan), or a config.json with "
         "\"base_model_tp_plan\"; got " +
             type_of(root));
  }
  if (root.contains("base_model_tp_plan")) {
    ojson plan = root["base_model_tp_plan"];
    if (!plan.is_object()) {
      fail(source, "\"base_model_tp_plan\"",
           "must be an object {module: style}, got " + type_of(plan));
    }
    root = std::move(plan);
  }
  const HfNames names = options.names.value_or(HfNames::kHf);
  const HfNameMap* map = nullptr;
  if (names == HfNames::kKerasHub) map = &name_map_of(options);
  RuleSet out;
  for (const auto& [key, value] : root.items()) {
    const std::string where = fmt::format("plan key {}", quote(key));
    if (!valid_hf_key(key)) {
      fail(source, where,
           "is not a module name (names joined by '.', '*' for a layer index; regex features "
           "are not part of Hugging Face plans)");
    }
    if (!value.is_string()) {
      fail(source, where,
           fmt::format("the style must be a string, got {} {}", type_of(value), excerpt(value)));
    }
    const std::string style_name = value.get<std::string>();
    const HfStyle* style = find_style(style_name);
    if (style == nullptr) {
      for (std::string_view u : kUnsupportedHfStyles) {
        if (u == style_name) {
          fail(source, where,
               fmt::format("the Hugging Face style {} (packed or expert-parallel weights) has no "
                           "layout meshlayout converts; supported styles: {}",
                           quote(style_name), known_styles()));
        }
      }
      fail(source, where,
           fmt::format("unknown Hugging Face style {}; expected one of {}", quote(style_name),
                       known_styles()));
    }
    if (!style->note.empty()) {
      out.warnings.push_back(fmt::format("{} {} ({}): {}", source, where, style_name, style->note));
    }
    const std::string module = full_module(key);
    const std::string origin = fmt::format("{} ({})", quote(key), style_name);
    auto add = [&](std::string pattern, Layout layout) {
      ConvertedRule r{.pattern = std::move(pattern),
                      .layout = std::move(layout),
                      .origin = origin,
                      .hf_style = style_name};
      check_layout(r, options.mesh);
      out.rules.push_back(std::move(r));
    };
    auto hf_layout = [&](bool bias, int rank) {
      Layout layout(static_cast<size_t>(rank));
      std::optional<int> d = style_split(*style, bias, rank);
      if (d && *d < 0) {
        fail(source, where,
             fmt::format("style {} splits dimension {} of a rank-{} {}, which has no such "
                         "dimension",
                         quote(style_name), *d - rank, rank, bias ? "bias" : "weight"));
      }
      if (d) layout[static_cast<size_t>(*d)] = DimSharding(options.tp_axis);
      return std::pair{layout, d};
    };
    if (names == HfNames::kHf) {
      std::vector<const HfParamName*> params;
      if (options.names && map == nullptr) {
        // The family map tells which parameters a module has and their ranks.
      }
      try {
        params = name_map_of(options).module_params(module);
      } catch (const ValueError&) {
        params.clear();
      }
      if (params.empty()) {  // an nn.Linear: weight (out, in), bias (out,)
        add(glob_to_regex(module + ".weight"), hf_layout(false, 2).first);
        add(glob_to_regex(module + ".bias"), hf_layout(true, 1).first);
      } else {
        for (const HfParamName* p : params) {
          add(glob_to_regex(p->hf_glob), hf_layout(p->param_name() == "bias", p->hf_rank()).first);
        }
      }
    } else {
      std::vector<const HfParamName*> params = map->module_params(module);
      if (params.empty()) {
        fail(source, where,
             fmt::format("the {} family's name map has no module {}, so it has no keras-hub "
                         "path; convert with --names hf for rules on Hugging Face names",
                         map->family(), quote(module)));
      }
      for (const HfParamName* p : params) {
        auto [hf, d] = hf_layout(p->param_name() == "bias", p->hf_rank());
        Layout keras(static_cast<size_t>(p->keras_rank()));
        if (d) {
          keras[static_cast<size_t>(p->keras_dim_of_hf_dim[static_cast<size_t>(*d)])] =
              DimSharding(options.tp_axis);
        }
        add(glob_to_regex(p->keras_glob), std::move(keras));
      }
    }
  }
  return out;
}

// One parameter's split, in HF dimensions, and the rule that gave it.
struct HfParamSplit {
  int rank = 0;
  std::optional<int> dim;
  const ConvertedRule* rule = nullptr;
  std::string name;  // the HF (or keras) name it was found on, for messages
};

// The HF dimension `layout` splits (on tp_axis only, one axis, one dimension at most).
std::optional<int> single_split(const ConvertedRule& rule, const Layout& layout,
                                const std::string& tp_axis, std::string_view what) {
  std::optional<int> dim;
  for (size_t d = 0; d < layout.size(); ++d) {
    const auto& axes = layout[d].axes();
    if (axes.empty()) continue;
    if (axes.size() > 1) {
      throw ValueError(fmt::format(
          "rule {} ({}): dimension {} is split over several mesh axes ({}); a Hugging Face "
          "plan splits one dimension over the one tensor-parallel axis",
          rule.origin, what, d, fmt::join(axes, ", ")));
    }
    if (axes[0] != tp_axis) {
      throw ValueError(fmt::format(
          "rule {} ({}): dimension {} is split on mesh axis {}; a Hugging Face plan splits "
          "only over the tensor-parallel axis {} (--tp-axis)",
          rule.origin, what, d, quote(axes[0]), quote(tp_axis)));
    }
    if (dim) {
      throw ValueError(fmt::format(
          "rule {} ({}): layout {} splits two dimensions; a Hugging Face plan splits one",
          rule.origin, what, layout_text(layout)));
    }
    dim = static_cast<int>(d);
  }
  return dim;
}

// The style of a module from its weight's and bias's splits.
std::string module_style(const std::string& module, const std::optional<HfParamSplit>& weight,
                         const std::optional<HfParamSplit>& bias) {
  std::optional<HfStyle::Kind> kind;
  const ConvertedRule* kind_rule = nullptr;
  if (weight) {
    if (!weight->dim) {
      kind = HfStyle::kReplicated;
    } else if (*weight->dim == weight->rank - 2) {
      kind = HfStyle::kColwise;
    } else {
      kind = HfStyle::kRowwise;
    }
    kind_rule = weight->rule;
  }
  if (bias) {
    if (bias->dim) {
      if (kind && *kind != HfStyle::kColwise) {
        throw ValueError(fmt::format(
            "module {}: rule {} splits the bias but rule {} does not split the weight's output "
            "dimension; no Hugging Face style splits a bias that way (colwise splits both, "
            "rowwise neither)",
            quote(module), bias->rule->origin, kind_rule->origin));
      }
      kind = HfStyle::kColwise;
    } else if (kind == HfStyle::kColwise) {
      throw ValueError(fmt::format(
          "module {}: rule {} splits the weight's output dimension (colwise) but rule {} keeps "
          "the bias whole; colwise splits the bias too",
          quote(module), kind_rule->origin, bias->rule->origin));
    } else if (!kind) {
      kind = HfStyle::kReplicated;
    }
  }
  // The style read from the plan, when every rule of the module carries the same one and it
  // means these layouts.
  std::optional<std::string> carried;
  bool same = true;
  for (const auto* p : {&weight, &bias}) {
    if (!*p) continue;
    const auto& s = (*p)->rule->hf_style;
    if (!s) {
      same = false;
    } else if (!carried) {
      carried = s;
    } else if (*carried != *s) {
      same = false;
    }
  }
  if (same && carried) {
    const HfStyle* style = find_style(*carried);
    const bool rowwise_bias_alone =
        !weight && style && style->kind == HfStyle::kRowwise && kind == HfStyle::kReplicated;
    if (style && (style->kind == *kind || rowwise_bias_alone)) return *carried;
  }
  switch (*kind) {
    case HfStyle::kColwise:
      return "colwise";
    case HfStyle::kRowwise:
      return "rowwise";
    default:
      return "replicate";
  }
}

struct ModuleSplits {
  std::string module;
  std::optional<HfParamSplit> weight, bias;
};

std::string write_plan(const std::vector<ModuleSplits>& modules) {
  std::string out = "{\n";
  for (size_t i = 0; i < modules.size(); ++i) {
    const ModuleSplits& m = modules[i];
    std::optional<std::string> key = plan_key(m.module);
    const ConvertedRule* r = m.weight ? m.weight->rule : m.bias->rule;
    if (!key) {
      throw ValueError(fmt::format(
          "rule {}: module {} is neither under the base model (\"model.…\") nor lm_head, so no "
          "Hugging Face plan key names it",
          r->origin, quote(m.module)));
    }
    out += fmt::format("  {}: {}{}\n", ojson(*key).dump(),
                       ojson(module_style(m.module, m.weight, m.bias)).dump(),
                       i + 1 < modules.size() ? "," : "");
  }
  return out + "}\n";
}

ModuleSplits& module_entry(std::vector<ModuleSplits>& modules, const std::string& module) {
  for (ModuleSplits& m : modules) {
    if (m.module == module) return m;
  }
  modules.push_back(ModuleSplits{.module = module});
  return modules.back();
}

void set_param(ModuleSplits& m, bool bias, HfParamSplit split) {
  std::optional<HfParamSplit>& slot = bias ? m.bias : m.weight;
  if (slot) {
    throw ValueError(fmt::format(
        "rules {} and {} both give the {} of module {}; a Hugging Face plan has one style per "
        "module",
        slot->rule->origin, split.rule->origin, bias ? "bias" : "weight", quote(m.module)));
  }
  slot = std::move(split);
}

// Whether `pattern` is anchored at both ends, and its glob.
struct GlobForm {
  std::string glob;
  bool anchored = false;
};

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

std::string write_hf(const RuleSet& rules, const ConvertOptions& options,
                     std::vector<std::string>& warnings) {
  const HfNames names = options.names.value_or(HfNames::kHf);
  std::vector<ModuleSplits> modules;
  if (names == HfNames::kHf) {
    for (const ConvertedRule& rule : rules.rules) {
      const std::string glob = rule_glob(rule, rules.mode, "a Hugging Face plan", warnings);
      const size_t dot = glob.rfind('.');
      const std::string param = dot == std::string::npos ? "" : glob.substr(dot + 1);
      if (param != "weight" && param != "bias") {
        throw ValueError(fmt::format(
            "rule {}: {} is not a module's .weight or .bias; Hugging Face plans give styles to "
            "modules (nn.Linear, nn.Embedding, norms) by their parameters{}",
            rule.origin, quote(glob),
            glob.find('/') != std::string::npos
                ? " (rules on keras-hub paths convert through the family's name map: names = "
                  "keras-hub, --names keras-hub)"
                : ""));
      }
      HfParamSplit split{.rank = static_cast<int>(rule.layout.size()),
                         .dim = single_split(rule, rule.layout, options.tp_axis, glob),
                         .rule = &rule,
                         .name = glob};
      set_param(module_entry(modules, glob.substr(0, dot)), param == "bias", std::move(split));
    }
    return write_plan(modules);
  }
  // keras-hub paths: look every variable of the family's map up, layer by layer.
  const HfNameMap& map = name_map_of(options);
  const LayoutMap layout_map = rules.to_layout_map();
  std::vector<int64_t> layers = options.layer_indices;
  if (layers.empty()) layers = {0, 1, 2, 3, 7, 31};
  std::vector<bool> used(rules.rules.size(), false);
  for (const HfParamName& p : map.params()) {
    const bool per_layer = p.keras_glob.find('*') != std::string::npos;
    std::optional<HfParamSplit> first;
    for (int64_t layer : per_layer ? layers : std::vector<int64_t>{0}) {
      const std::string path = replace_stars(p.keras_glob, layer);
      std::optional<size_t> index;
      try {
        index = layout_map.match_index(path);
      } catch (const ValueError& e) {
        throw ValueError(fmt::format("keras-hub variable {}: {}", quote(path), e.what()));
      }
      HfParamSplit split{.rank = p.hf_rank(), .name = path};
      if (index) {
        const ConvertedRule& rule = rules.rules[*index];
        used[*index] = true;
        split.rule = &rule;
        if (static_cast<int>(rule.layout.size()) != p.keras_rank()) {
          throw ValueError(fmt::format(
              "rule {}: layout {} has {} dimensions but keras-hub variable {} has {}", rule.origin,
              layout_text(rule.layout), rule.layout.size(), quote(path), p.keras_rank()));
        }
        std::optional<int> k = single_split(rule, rule.layout, options.tp_axis, path);
        if (k) {
          const int h = p.hf_dim_of_keras_dim[static_cast<size_t>(*k)];
          if (h < 0) {
            throw ValueError(fmt::format(
                "rule {}: splits dimension {} of {}, a minor part of a Hugging Face dimension "
                "(head_dim within heads*head_dim of {}); no Hugging Face plan splits it alone",
                rule.origin, *k, quote(path), quote(p.hf_glob)));
          }
          split.dim = h;
        }
      }
      if (!first) {
        first = split;
      } else if (first->dim != split.dim || (first->rule == nullptr) != (split.rule == nullptr)) {
        auto describe = [](const HfParamSplit& s) {
          if (!s.rule) return std::string("no rule (replicated)");
          return fmt::format("rule {} ({})", s.rule->origin,
                             s.dim ? fmt::format("HF dimension {}", *s.dim) : "not split");
        };
        throw ValueError(fmt::format(
            "{} gets {} but {} gets {}; a Hugging Face plan gives every layer of {} one style",
            quote(first->name), describe(*first), quote(split.name), describe(split),
            quote(p.hf_glob)));
      }
    }
    if (first && first->rule) {
      set_param(module_entry(modules, p.module_glob()), p.param_name() == "bias",
                std::move(*first));
    }
  }
  // In the order of the rules that give them (the plan's own order, when read from one).
  auto first_rule = [&](const ModuleSplits& m) {
    size_t i = rules.rules.size();
    for (const auto* p : {&m.weight, &m.bias}) {
      if (*p) i = std::min(i, static_cast<size_t>((*p)->rule - rules.rules.data()));
    }
    return i;
  };
  std::stable_sort(
      modules.begin(), modules.end(),
      [&](const ModuleSplits& a, const ModuleSplits& b) { return first_rule(a) < first_rule(b); });
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      throw ValueError(fmt::format(
          "rule {}: pattern {} matches no variable of the {} family's keras-hub name map "
          "(layers checked: {}), so no Hugging Face plan key can express it",
          rules.rules[i].origin, quote(rules.rules[i].pattern), map.family(),
          fmt::join(layers, ", ")));
    }
  }
  return write_plan(modules);
}

// ---------------------------------------------------------------- MaxText

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
            "logical_axis_rules[{}] ({} -> {}) was skipped: {} already "
            "splits another dimension of this tensor",
            r, name, fmt::join(axes, ", "), fmt::join(axes, "/"));
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

RuleSet read_maxtext(std::string_view text, const ConvertOptions& options,
                     std::string_view source) {
  ojson root = parse_yaml_subset(text, source);
  if (!root.is_object()) {
    fail(source, "top level",
         "must be a mapping with logical_axis_rules and logical_axes, got " + type_of(root));
  }
  for (const auto& [key, value] : root.items()) {
    if (key != "logical_axis_rules" && key != "logical_axes" && key != "mesh_axes") {
      fail(source, "top level",
           fmt::format("unknown key {}; expected logical_axis_rules, logical_axes and "
                       "optionally mesh_axes",
                       quote(key)));
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

std::string write_maxtext(const RuleSet& rules, const ConvertOptions& options,
                          std::vector<std::string>& warnings) {
  ojson root = ojson::object();
  const std::optional<DeviceMesh>& mesh = options.mesh ? options.mesh : rules.mesh;
  if (mesh) {
    root["mesh_axes"] = mesh->axis_names();
  } else if (rules.mesh_axes) {
    root["mesh_axes"] = *rules.mesh_axes;
  }
  bool carried = rules.logical_axis_rules.has_value();
  for (const ConvertedRule& r : rules.rules) carried = carried && r.logical_axes.has_value();
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

// ---------------------------------------------------------------- keras-hub, meshlayout

RuleSet read_keras_hub(std::string_view text, const ConvertOptions& options,
                       std::string_view source) {
  ojson root = parse_json_ordered(text, source);
  if (!root.is_object()) {
    fail(source, "top level",
         "must be an object {regex: layout} (keras-hub's get_layout_map as JSON), got " +
             type_of(root));
  }
  RuleSet out;
  for (const auto& [pattern, layout] : root.items()) {
    const std::string where = fmt::format("rule {}", quote(pattern));
    ConvertedRule r{.pattern = pattern,
                    .layout = parse_layout(layout, source, where),
                    .origin = fmt::format("{} {}", source, where)};
    check_layout(r, options.mesh);
    out.rules.push_back(std::move(r));
  }
  return out;
}

RuleSet read_meshlayout(std::string_view text, const ConvertOptions& options,
                        std::string_view source) {
  RulesFile file = parse_rules_json(text, source);
  RuleSet out;
  out.mesh = file.mesh;
  out.mode = file.mode;
  for (size_t i = 0; i < file.rules.size(); ++i) {
    ConvertedRule r{
        .pattern = file.rules[i].first,
        .layout = file.rules[i].second,
        .origin = fmt::format("{} rules[{}] ({})", source, i, quote(file.rules[i].first))};
    check_layout(r, options.mesh ? options.mesh : file.mesh);
    out.rules.push_back(std::move(r));
  }
  return out;
}

std::string rules_lines(const RuleSet& rules, bool as_object) {
  std::string out;
  for (size_t i = 0; i < rules.rules.size(); ++i) {
    const ConvertedRule& r = rules.rules[i];
    const std::string pattern =
        ojson(r.pattern).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string layout = layout_text(r.layout);
    const std::string sep = i + 1 < rules.rules.size() ? "," : "";
    out += as_object ? fmt::format("  {}: {}{}\n", pattern, layout, sep)
                     : fmt::format("    [{}, {}]{}\n", pattern, layout, sep);
  }
  return out;
}

void warn_dropped_activation_semantics(const RuleSet& rules, RulesDialect to,
                                       std::vector<std::string>& warnings) {
  for (const ConvertedRule& r : rules.rules) {
    if (!r.hf_style) continue;
    const HfStyle* s = find_style(*r.hf_style);
    if (s && s->activation_semantics) {
      warnings.push_back(fmt::format(
          "rule {}: {} keeps the parameters' layout {}; what {} does beyond it (to activations "
          "or gradients, or as local tensors) has no place in {} rules",
          r.origin, quote(r.pattern), layout_text(r.layout), *r.hf_style, rules_dialect_name(to)));
    }
  }
}

}  // namespace

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
