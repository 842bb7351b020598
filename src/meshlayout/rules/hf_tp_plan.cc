#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/rules/hf_name_map.h"
#include "meshlayout/rules/rules_internal.h"

// Hugging Face tensor-parallel plans (rule_dialects.h says what each style means).
namespace meshlayout::rules_internal {
namespace {

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
    } else if (*weight->dim == weight->rank - 1) {
      kind = HfStyle::kRowwise;
    } else {
      throw ValueError(fmt::format(
          "rule {}: splits dimension {} of the rank-{} weight of module {}; Hugging Face styles "
          "split a weight's last dimension (rowwise) or the one before it (colwise)",
          weight->rule->origin, *weight->dim, weight->rank, quote(module)));
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

// With the model's sizes and a mesh: a warning when HF dimension `hf_dim` of `p` is a reshape
// (heads*head_dim) whose major part (heads) the tensor-parallel axis does not divide, so that
// HF's blocks of the flat dimension and keras-hub's blocks of whole heads are other rows.
void warn_uneven_reshape(const HfParamName& p, int hf_dim, const ConvertOptions& options,
                         const std::string& origin, std::vector<std::string>& warnings) {
  if (!options.mesh || options.model_mappings.empty()) return;
  const auto& axes = options.mesh->axis_names();
  if (std::find(axes.begin(), axes.end(), options.tp_axis) == axes.end()) return;
  const int64_t k = options.mesh->axis_size(options.tp_axis);
  for (const HfWeightMapping& m : options.model_mappings) {
    if (hf_name_map_from_mappings("", {m}).params().at(0).hf_glob != p.hf_glob) continue;
    // The view dimensions of HF dimension hf_dim: the major one and the product of the rest.
    const int keras_major = p.keras_dim_of_hf_dim[static_cast<size_t>(hf_dim)];
    const int64_t major =
        m.view_shape[static_cast<size_t>(m.perm[static_cast<size_t>(keras_major)])];
    const int64_t n = m.hf_shape[static_cast<size_t>(hf_dim)];
    const int64_t minor = n / major;
    if (minor > 1 && major % k != 0) {
      warnings.push_back(fmt::format(
          "{}: {} dimension {} is {} x {} ({}); split {} ways on {}, Hugging Face cuts the flat "
          "{} rows in blocks of {} but keras-hub's {} splits the {} whole units in blocks of {}, "
          "so devices hold other rows (the same only when {} divides {})",
          origin, quote(m.hf_name), hf_dim, major, minor, m.hf_shape_fields, k,
          quote(options.tp_axis), n, (n + k - 1) / k, quote(m.keras_path), major,
          (major + k - 1) / k, k, major));
    }
    return;
  }
}

}  // namespace

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
      // The family's map tells which parameters a module has and their ranks.
      std::string no_map;
      try {
        params = name_map_of(options).module_params(module);
      } catch (const ValueError& e) {
        no_map = e.what();
      }
      if (params.empty()) {  // an nn.Linear: weight (out, in), bias (out,)
        out.warnings.push_back(fmt::format(
            "{} {} ({}): module {} {}; taken as an nn.Linear (weight (out, in), bias (out,))",
            source, where, style_name, quote(module),
            no_map.empty()
                ? fmt::format("is not in the {} family's name map", name_map_of(options).family())
                : "has no name map to give its parameters (" + no_map + ")"));
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
        if (d)
          warn_uneven_reshape(*p, *d, options, fmt::format("{} {} ({})", source, where, style_name),
                              out.warnings);
        add(glob_to_regex(p->keras_glob), std::move(keras));
      }
    }
  }
  return out;
}

std::string write_hf(const RuleSet& rules, const ConvertOptions& options,
                     std::vector<std::string>& warnings) {
  const HfNames names = options.names.value_or(HfNames::kHf);
  std::vector<ModuleSplits> modules;
  if (names == HfNames::kHf) {
    // Regex rules become the name map's tensors they decide (plan keys are module names).
    const RuleSet expanded = expand_to_globs(rules, options, "a Hugging Face plan", warnings);
    for (const ConvertedRule& rule : expanded.rules) {
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
  const std::vector<int64_t> layers = checked_layers(options);
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
          if (layer == (per_layer ? layers.front() : 0)) {
            warn_uneven_reshape(p, h, options, fmt::format("rule {}", rule.origin), warnings);
          }
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

}  // namespace meshlayout::rules_internal
