// rule_check.h — `meshlayout rules check` and `rules diff`: what a rule set does to every
// tensor of a model (model_tensors.h), decided from the config alone, before anything is
// allocated.
//
// check_rules lists every problem, not just the first:
//   * a tensor of more than min_bytes that no rule splits (no rule, a layout of nulls, or
//     only mesh axes of size 1): it would be replicated on every device (without a mesh in
//     the rules, any named axis counts as a split);
//   * a rule that matches no tensor (a typo, a renamed layer), or, in mode first, one that
//     matches tensors but decides none (an earlier rule takes them all);
//   * a tensor that several rules match (search and fullmatch modes refuse the lookup; in
//     mode first the earlier rule wins silently): the tensor and every matching rule;
//   * a rule whose layout has another rank than a tensor it decides, or names a mesh axis the
//     rules' mesh lacks.
// diff_rules lists the tensors whose layouts differ between two rule sets (no rule and a
// layout of nulls are both "replicated"); either side may be ambiguous ("ambiguous: …").
//
// Example:
//   ModelTensors m = load_model_tensors("llama-dir");
//   for (const std::string& p : check_rules(rules, m.tensors, {.min_bytes = 1 << 20})) …
//   for (const LayoutDifference& d : diff_rules(hf_plan_rules, keras_hub_rules, m.tensors))
//     std::cout << d.path << ": " << d.a << " | " << d.b << "\n";
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshlayout/rules/model_tensors.h"
#include "meshlayout/rules/rule_dialects.h"

namespace meshlayout {

struct RulesCheckOptions {
  /// Tensors of more bytes than this must be split.
  int64_t min_bytes = int64_t{1} << 20;
};

/// Every problem of `rules` on `tensors` (see the file comment), each naming the tensor or the
/// rule (its origin) and what was expected; empty when there is none.
std::vector<std::string> check_rules(const RuleSet& rules, const std::vector<ModelTensor>& tensors,
                                     const RulesCheckOptions& options = {});

/// A tensor whose layout differs: each side's layout as JSON text ([null, "model", null]),
/// "replicated", or "ambiguous: rules …", and the rule that decides it ("" for none).
struct LayoutDifference {
  std::string path;
  Shape shape;
  std::string a, b;
  std::string rule_a, rule_b;
};

/// The tensors of `tensors` (in order) whose layouts under `a` and `b` differ.
std::vector<LayoutDifference> diff_rules(const RuleSet& a, const RuleSet& b,
                                         const std::vector<ModelTensor>& tensors);

}  // namespace meshlayout
