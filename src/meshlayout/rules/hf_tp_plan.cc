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
  HfStyleKind kind;
  bool activation_semantics;  // the style says more than its parameters' layouts
  std::string_view note;      // a warning when read, or empty
};

constexpr HfStyle kHfStyles[] = {
    {"colwise", HfStyleKind::kColwise, false, ""},
    {"rowwise", HfStyleKind::kRowwise, false, ""},
    {"colwise_rep", HfStyleKind::kColwise, true, ""},
    {"rowwise_rep", HfStyleKind::kRowwise, true, ""},
    {"local_colwise", HfStyleKind::kColwise, true, ""},
    {"local_rowwise", HfStyleKind::kRowwise, true, ""},
    {"replicate", HfStyleKind::kReplicated, false, ""},
    {"sequence_parallel", HfStyleKind::kReplicated, true, ""},
    {"replicated_with_grad_allreduce", HfStyleKind::kReplicated, true, ""},
    {"gather", HfStyleKind::kReplicated, true, ""},
    {"local", HfStyleKind::kReplicated, true,
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
  if (style.kind == HfStyleKind::kReplicated) return std::nullopt;
  if (bias) {
    if (style.kind == HfStyleKind::kRowwise) return std::nullopt;
    return rank - 1;
  }
  return style.kind == HfStyleKind::kColwise ? rank - 2 : rank - 1;
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

}  // namespace

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
    if (hf_name_glob(m.hf_name) != p.hf_glob) continue;
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

std::optional<HfStyleKind> hf_style_kind(std::string_view style) {
  const HfStyle* s = find_style(style);
  return s ? std::optional(s->kind) : std::nullopt;
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
        for (const std::string& glob : p->keras_globs) add(glob_to_regex(glob), keras);
      }
    }
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

}  // namespace meshlayout::rules_internal
