// bind_rules.cc — rules in other stacks' dialects for Python (rules/rule_dialects.h):
// _convert_rules (text in one dialect -> text in another, with the warnings) and _read_rules
// (text -> [(pattern, axes)], which meshlayout.rules_to_layout_map turns into a LayoutMap);
// rules derived from and checked on a model (rules/rule_suggest.h, rules/rule_check.h):
// _suggest_rules (-> rules file text, notes), _check_rules (-> problems), _diff_rules
// (-> [(path, shape, layout_a, layout_b)]).
//
// Example (python/meshlayout/__init__.py wraps these):
//   text, warnings = _convert_rules(plan_text, "hf-tp-plan", "keras-hub", None, "llama",
//                                   "model", None, [], None, "plan.json")
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/models/hf_llama_config.h"
#include "meshlayout/rules/rule_check.h"
#include "meshlayout/rules/rule_dialects.h"
#include "meshlayout/rules/rule_suggest.h"

namespace meshlayout::python {
namespace {

// `model`: a Hugging Face model directory (its config.json: family, layers, weights);
// `family` (when given) and a non-empty `layer_indices` override what it gives.
ConvertOptions make_options(const std::optional<std::string>& names,
                            const std::optional<std::string>& family, const std::string& tp_axis,
                            std::optional<DeviceMesh> mesh, std::vector<int64_t> layer_indices,
                            const std::optional<std::string>& model) {
  ConvertOptions o;
  if (model) use_model_config(o, LlamaConfig::from_file(*model + "/config.json"));
  if (names) {
    if (*names == "hf") {
      o.names = HfNames::kHf;
    } else if (*names == "keras-hub") {
      o.names = HfNames::kKerasHub;
    } else {
      throw ValueError("names=" + quote(*names) + ": expected 'hf' or 'keras-hub'");
    }
  }
  if (family) {
    o.family = *family;
    o.name_map.reset();
  }
  o.tp_axis = tp_axis;
  o.mesh = std::move(mesh);
  if (!layer_indices.empty()) o.layer_indices = std::move(layer_indices);
  return o;
}

py::object axes_tuple(const std::vector<DimSharding>& layout) {
  py::list out;
  for (const DimSharding& d : layout) {
    if (!d.is_sharded()) {
      out.append(py::none());
    } else if (d.axes().size() == 1) {
      out.append(py::str(d.axes()[0]));
    } else {
      out.append(py::tuple(py::cast(d.axes())));
    }
  }
  return py::tuple(out);
}

// The rules of `text` (in `dialect`) on `model`'s tensors: HF plans on keras-hub paths
// through the model's own name map (HF names for a weights-only model), as `rules check`.
RuleSet model_rules(const std::string& text, const std::string& dialect, const ModelTensors& model,
                    std::optional<DeviceMesh> mesh, const std::string& tp_axis,
                    const std::string& source, std::vector<std::string>& warnings) {
  ConvertOptions o;
  o.tp_axis = tp_axis;
  o.mesh = std::move(mesh);
  if (model.config) use_model_config(o, *model.config);
  o.names = model.config ? HfNames::kKerasHub : HfNames::kHf;
  RuleSet rules = read_rules(text, parse_rules_dialect(dialect), o, source);
  warnings.insert(warnings.end(), rules.warnings.begin(), rules.warnings.end());
  return rules;
}

}  // namespace

void bind_rules(py::module_& m) {
  m.def(
      "_suggest_rules",
      [](const std::string& model, const DeviceMesh& mesh, const std::string& strategy,
         int64_t min_bytes, const std::optional<std::string>& family, const std::string& model_axis,
         std::vector<std::string> data_axes) {
        py::gil_scoped_release release;
        const Suggestion s = suggest_rules(load_model_tensors(model, family), mesh,
                                           {.strategy = parse_suggest_strategy(strategy),
                                            .min_bytes = min_bytes,
                                            .model_axis = model_axis,
                                            .data_axes = std::move(data_axes)});
        return std::make_tuple(write_rules(s.rules, RulesDialect::kMeshlayout, {}), s.notes);
      },
      py::arg("model"), py::arg("mesh"), py::arg("strategy"), py::arg("min_bytes"),
      py::arg("family"), py::arg("model_axis"), py::arg("data_axes"));
  m.def(
      "_check_rules",
      [](const std::string& model, const std::string& text, const std::string& dialect,
         int64_t min_bytes, std::optional<DeviceMesh> mesh,
         const std::optional<std::string>& family, const std::string& tp_axis,
         const std::string& source) {
        py::gil_scoped_release release;
        const ModelTensors m = load_model_tensors(model, family);
        std::vector<std::string> warnings;
        const RuleSet rules =
            model_rules(text, dialect, m, std::move(mesh), tp_axis, source, warnings);
        return std::make_tuple(check_rules(rules, m.tensors, {.min_bytes = min_bytes}), warnings);
      },
      py::arg("model"), py::arg("text"), py::arg("dialect"), py::arg("min_bytes"), py::arg("mesh"),
      py::arg("family"), py::arg("tp_axis"), py::arg("source"));
  m.def(
      "_diff_rules",
      [](const std::string& model, const std::string& a, const std::string& b,
         const std::string& from_a, const std::string& from_b, std::optional<DeviceMesh> mesh,
         const std::optional<std::string>& family, const std::string& tp_axis) {
        std::vector<std::tuple<std::string, std::vector<int64_t>, std::string, std::string>> out;
        std::vector<std::string> warnings;
        {
          py::gil_scoped_release release;
          const ModelTensors m = load_model_tensors(model, family);
          const RuleSet ra = model_rules(a, from_a, m, mesh, tp_axis, "A", warnings);
          const RuleSet rb = model_rules(b, from_b, m, mesh, tp_axis, "B", warnings);
          for (const LayoutDifference& d : diff_rules(ra, rb, m.tensors)) {
            out.emplace_back(d.path, d.shape, d.a, d.b);
          }
        }
        return std::make_tuple(out, warnings);
      },
      py::arg("model"), py::arg("a"), py::arg("b"), py::arg("from_a"), py::arg("from_b"),
      py::arg("mesh"), py::arg("family"), py::arg("tp_axis"));
  m.def(
      "_convert_rules",
      [](const std::string& text, const std::string& from, const std::string& to,
         const std::optional<std::string>& names, const std::optional<std::string>& family,
         const std::string& tp_axis, std::optional<DeviceMesh> mesh,
         std::vector<int64_t> layer_indices, const std::optional<std::string>& model,
         const std::string& source) {
        ConvertOptions o =
            make_options(names, family, tp_axis, std::move(mesh), std::move(layer_indices), model);
        std::vector<std::string> warnings;
        std::string out;
        {
          py::gil_scoped_release release;
          out = convert_rules(text, parse_rules_dialect(from), parse_rules_dialect(to), o, source,
                              &warnings);
        }
        return std::make_tuple(out, warnings);
      },
      py::arg("text"), py::arg("from_dialect"), py::arg("to_dialect"), py::arg("names"),
      py::arg("family"), py::arg("tp_axis"), py::arg("mesh"), py::arg("layer_indices"),
      py::arg("model"), py::arg("source"));
  m.def(
      "_read_rules",
      [](const std::string& text, const std::string& dialect,
         const std::optional<std::string>& names, const std::optional<std::string>& family,
         const std::string& tp_axis, std::optional<DeviceMesh> mesh,
         const std::optional<std::string>& model, const std::string& source) {
        ConvertOptions o = make_options(names, family, tp_axis, std::move(mesh), {}, model);
        RuleSet rules = read_rules(text, parse_rules_dialect(dialect), o, source);
        py::list out;
        for (const ConvertedRule& r : rules.rules) {
          out.append(py::make_tuple(r.pattern, axes_tuple(r.layout)));
        }
        return py::make_tuple(out, std::string(match_mode_name(rules.mode)), rules.warnings);
      },
      py::arg("text"), py::arg("dialect"), py::arg("names"), py::arg("family"), py::arg("tp_axis"),
      py::arg("mesh"), py::arg("model"), py::arg("source"));
}

}  // namespace meshlayout::python
