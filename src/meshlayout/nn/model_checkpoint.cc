#include "meshlayout/nn/model_checkpoint.h"

#include <fmt/format.h>

#include <set>
#include <unordered_map>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

std::string_view style_name(VariablePathStyle style) {
  return style == VariablePathStyle::kScope ? "scope paths (my_model/d1/kernel)"
                                            : "object paths (d1.kernel)";
}

const std::string& variable_path(const Variable& v, VariablePathStyle style) {
  return style == VariablePathStyle::kScope ? v.path() : v.object_path();
}

// "'a', 'b', 'c' and 7 more": long lists stay readable.
std::string quoted_list(const std::vector<std::string>& names, size_t show = 10) {
  std::vector<std::string> quoted;
  for (size_t i = 0; i < names.size() && i < show; ++i) quoted.push_back("'" + names[i] + "'");
  std::string out = fmt::format("{}", fmt::join(quoted, ", "));
  if (names.size() > show) out += fmt::format(" and {} more", names.size() - show);
  return out;
}

}  // namespace

std::vector<std::pair<VariablePtr, std::string>> checkpoint_names(
    const Model& model, VariablePathStyle style,
    const std::map<std::string, std::string>& name_map) {
  std::vector<std::pair<VariablePtr, std::string>> out;
  std::set<const Variable*> seen;  // a shared layer's variables appear once
  for (const VariablePtr& v : model.variables()) {
    if (!seen.insert(v.get()).second) continue;
    const std::string& path = variable_path(*v, style);
    if (path.empty()) {
      throw FailedPreconditionError(fmt::format(
          "{} has no {} yet: build the model (call it once) before saving or loading it",
          v->describe(), style == VariablePathStyle::kScope ? "scope path" : "object path"));
    }
    auto renamed = name_map.find(path);
    out.emplace_back(v, renamed == name_map.end() ? path : renamed->second);
  }
  return out;
}

SaveReport save_model(const Model& model, const std::string& path,
                      const ModelSaveOptions& options) {
  auto names = checkpoint_names(model, options.path_style, options.name_map);
  std::unordered_map<std::string, const Variable*> taken;
  std::vector<NamedArray> arrays;
  for (const auto& [v, name] : names) {
    auto [it, fresh] = taken.emplace(name, v.get());
    if (!fresh) {
      throw ValueError(
          fmt::format("{} and {} would both be saved as '{}'; give one another "
                      "name in name_map",
                      it->second->describe(), v->describe(), name));
    }
    arrays.push_back(NamedArray{name, &v->value()});
  }
  return save_arrays(path, arrays, {.metadata = options.metadata, .progress = options.progress});
}

ModelLoadReport load_model(Model& model, const Checkpoint& checkpoint,
                           const ModelLoadOptions& options) {
  auto names = checkpoint_names(model, options.path_style, options.name_map);
  ModelLoadReport report;
  std::vector<LoadTarget> targets;
  std::set<std::string_view> taken;
  for (const auto& [v, name] : names) {
    if (checkpoint.find(name).second == nullptr) {
      report.missing.push_back(name);
      continue;
    }
    targets.push_back(LoadTarget{name, &v->mutable_value()});
    taken.insert(name);
  }
  for (const auto& [file, info] : checkpoint.tensors()) {
    if (!taken.contains(info->name)) report.unexpected.push_back(info->name);
  }
  if (!report.missing.empty() && !options.allow_missing) {
    std::string hint;
    if (targets.empty()) {  // nothing matched: perhaps the other path style
      const VariablePathStyle other = options.path_style == VariablePathStyle::kScope
                                          ? VariablePathStyle::kObject
                                          : VariablePathStyle::kScope;
      size_t would_match = 0;
      for (const auto& [v, name] : checkpoint_names(model, other, options.name_map)) {
        if (checkpoint.find(name).second != nullptr) ++would_match;
      }
      if (would_match > 0) {
        hint = fmt::format("; {} of them are in the checkpoint under {}: pass that path_style",
                           would_match, style_name(other));
      }
    }
    throw NotFoundError(fmt::format(
        "checkpoint '{}' lacks {} of the model's {} variables, looked up by {}: {}{}{} (pass "
        "allow_missing to keep their current values)",
        checkpoint.path(), report.missing.size(), names.size(), style_name(options.path_style),
        quoted_list(report.missing),
        report.unexpected.empty()
            ? ""
            : fmt::format("; tensors no variable takes: {}", quoted_list(report.unexpected)),
        hint));
  }
  if (!report.unexpected.empty() && !options.allow_unexpected) {
    throw ValueError(fmt::format(
        "checkpoint '{}' holds {} tensors that no variable of the model takes (looked up by "
        "{}): {} (pass allow_unexpected to ignore them, or map names with name_map)",
        checkpoint.path(), report.unexpected.size(), style_name(options.path_style),
        quoted_list(report.unexpected)));
  }
  try {
    report.io =
        load_arrays(checkpoint, targets,
                    {.convert_dtypes = options.convert_dtypes, .progress = options.progress});
  } catch (const ValueError& e) {
    throw ValueError(fmt::format("loading model '{}': {}", model.name(), e.what()));
  }
  report.loaded = targets.size();
  return report;
}

}  // namespace meshlayout
