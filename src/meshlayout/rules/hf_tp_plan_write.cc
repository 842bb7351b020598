#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/rules/hf_name_map.h"
#include "meshlayout/rules/rules_internal.h"

// Hugging Face tensor-parallel plans written from rules (rule_dialects.h says what each style
// means; hf_tp_plan.cc reads them).
namespace meshlayout::rules_internal {
namespace {

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
  std::optional<HfStyleKind> kind;
  const ConvertedRule* kind_rule = nullptr;
  if (weight) {
    if (!weight->dim) {
      kind = HfStyleKind::kReplicated;
    } else if (*weight->dim == weight->rank - 2) {
      kind = HfStyleKind::kColwise;
    } else if (*weight->dim == weight->rank - 1) {
      kind = HfStyleKind::kRowwise;
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
      if (kind && *kind != HfStyleKind::kColwise) {
        throw ValueError(fmt::format(
            "module {}: rule {} splits the bias but rule {} does not split the weight's output "
            "dimension; no Hugging Face style splits a bias that way (colwise splits both, "
            "rowwise neither)",
            quote(module), bias->rule->origin, kind_rule->origin));
      }
      kind = HfStyleKind::kColwise;
    } else if (kind == HfStyleKind::kColwise) {
      throw ValueError(fmt::format(
          "module {}: rule {} splits the weight's output dimension (colwise) but rule {} keeps "
          "the bias whole; colwise splits the bias too",
          quote(module), kind_rule->origin, bias->rule->origin));
    } else if (!kind) {
      kind = HfStyleKind::kReplicated;
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
    const std::optional<HfStyleKind> style = hf_style_kind(*carried);
    const bool rowwise_bias_alone =
        !weight && style == HfStyleKind::kRowwise && kind == HfStyleKind::kReplicated;
    if (style && (*style == *kind || rowwise_bias_alone)) return *carried;
  }
  switch (*kind) {
    case HfStyleKind::kColwise:
      return "colwise";
    case HfStyleKind::kRowwise:
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

}  // namespace

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
    // Every keras glob of the tensor (a sparse block's two names) in every checked layer.
    std::vector<std::string> paths;
    for (const std::string& glob : p.keras_globs) {
      const bool per_layer = glob.find('*') != std::string::npos;
      for (int64_t layer : per_layer ? layers : std::vector<int64_t>{0}) {
        paths.push_back(replace_stars(glob, layer));
      }
    }
    std::optional<HfParamSplit> first;
    for (const std::string& path : paths) {
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
          if (h == kHfExpertIndex) {
            throw ValueError(fmt::format(
                "rule {}: splits dimension {} of {}, the stacked experts (expert parallelism: "
                "each device holds whole experts); a Hugging Face tensor-parallel plan gives "
                "each expert's tensor {} a style that splits it within, and transformers' "
                "expert-parallel plans (base_model_ep_plan: grouped_gemm, ep_router) are not "
                "converted",
                rule.origin, *k, quote(path), quote(p.hf_glob)));
          }
          if (h < 0) {
            throw ValueError(fmt::format(
                "rule {}: splits dimension {} of {}, a minor part of a Hugging Face dimension "
                "(head_dim within heads*head_dim of {}); no Hugging Face plan splits it alone",
                rule.origin, *k, quote(path), quote(p.hf_glob)));
          }
          split.dim = h;
          if (path == paths.front()) {
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
            "{} gets {} but {} gets {}; a Hugging Face plan gives every layer{} of {} one style",
            quote(first->name), describe(*first), quote(split.name), describe(split),
            p.stacked() ? " and expert" : "", quote(p.hf_glob)));
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

}  // namespace meshlayout::rules_internal
