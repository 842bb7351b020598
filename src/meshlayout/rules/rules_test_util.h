// rules_test_util.h — what the rules tests share: the tensor-parallel plans of transformers'
// config classes for each family, a file reader, an error catcher and ConvertOptions makers.
//
// Example:
//   ConvertOptions o = with_names(HfNames::kKerasHub, "qwen2");
//   RuleSet r = read_rules(kDensePlan, RulesDialect::kHfTpPlan, o, "plan.json");
#pragma once

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/rules/rule_dialects.h"

namespace meshlayout::rules_test {

// base_model_tp_plan of transformers' config classes (v4.51-v4.56: LlamaConfig, Qwen2Config,
// MistralConfig, Qwen3Config, GemmaConfig, Gemma2Config, Gemma3TextConfig share the dense
// plan; MixtralConfig's experts; Qwen3MoeConfig's and Qwen2MoeConfig's experts and dense
// layers, the router and Qwen 2's shared expert left replicated).
inline constexpr char kDensePlan[] = R"({
  "layers.*.self_attn.q_proj": "colwise",
  "layers.*.self_attn.k_proj": "colwise",
  "layers.*.self_attn.v_proj": "colwise",
  "layers.*.self_attn.o_proj": "rowwise",
  "layers.*.mlp.gate_proj": "colwise",
  "layers.*.mlp.up_proj": "colwise",
  "layers.*.mlp.down_proj": "rowwise"
}
)";
inline constexpr char kMixtralPlan[] = R"({
  "layers.*.self_attn.q_proj": "colwise",
  "layers.*.self_attn.k_proj": "colwise",
  "layers.*.self_attn.v_proj": "colwise",
  "layers.*.self_attn.o_proj": "rowwise",
  "layers.*.block_sparse_moe.gate": "colwise_rep",
  "layers.*.block_sparse_moe.experts.*.w1": "colwise",
  "layers.*.block_sparse_moe.experts.*.w2": "rowwise",
  "layers.*.block_sparse_moe.experts.*.w3": "colwise"
}
)";
inline constexpr char kQwenMoePlan[] = R"({
  "layers.*.self_attn.q_proj": "colwise",
  "layers.*.self_attn.k_proj": "colwise",
  "layers.*.self_attn.v_proj": "colwise",
  "layers.*.self_attn.o_proj": "rowwise",
  "layers.*.mlp.experts.*.gate_proj": "colwise",
  "layers.*.mlp.experts.*.up_proj": "colwise",
  "layers.*.mlp.experts.*.down_proj": "rowwise",
  "layers.*.mlp.gate_proj": "colwise",
  "layers.*.mlp.up_proj": "colwise",
  "layers.*.mlp.down_proj": "rowwise"
}
)";

// Qwen3Config's plan in later transformers: the head norms' gradients all-reduced.
inline constexpr char kQwen3NormPlan[] = R"({
  "layers.*.self_attn.q_proj": "colwise",
  "layers.*.self_attn.k_proj": "colwise",
  "layers.*.self_attn.v_proj": "colwise",
  "layers.*.self_attn.q_norm": "replicated_with_grad_allreduce",
  "layers.*.self_attn.k_norm": "replicated_with_grad_allreduce",
  "layers.*.self_attn.o_proj": "rowwise",
  "layers.*.mlp.gate_proj": "colwise",
  "layers.*.mlp.up_proj": "colwise",
  "layers.*.mlp.down_proj": "rowwise"
}
)";

// `plan` with each style that only adds activation or gradient handling replaced by the
// plain style of the same parameter layouts (what a LayoutMap or MaxText file keeps).
inline std::string plain_styles(std::string plan) {
  for (auto [from, to] : {std::pair{"\"colwise_rep\"", "\"colwise\""},
                          std::pair{"\"replicated_with_grad_allreduce\"", "\"replicate\""}}) {
    for (size_t at; (at = plan.find(from)) != std::string::npos;) {
      plan.replace(at, std::string_view(from).size(), to);
    }
  }
  return plan;
}

struct FamilyPlan {
  const char* family;
  const char* plan;
  bool keras_hub;  // a keras-hub name map exists
};
inline const FamilyPlan kPlans[] = {
    {"llama", kDensePlan, true},       {"qwen2", kDensePlan, true},
    {"mistral", kDensePlan, true},     {"qwen3", kDensePlan, true},
    {"gemma", kDensePlan, true},       {"mixtral", kMixtralPlan, true},
    {"qwen3", kQwen3NormPlan, true},   {"gemma2", kDensePlan, true},
    {"gemma3_text", kDensePlan, true}, {"qwen3_moe", kQwenMoePlan, true},
    {"qwen2_moe", kQwenMoePlan, true}};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

inline ConvertOptions with_names(HfNames names, std::string family = "llama") {
  ConvertOptions o;
  o.names = names;
  o.family = std::move(family);
  return o;
}

}  // namespace meshlayout::rules_test
