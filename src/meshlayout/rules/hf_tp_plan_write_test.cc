// Hugging Face plans written from rules (hf_tp_plan_write.cc): keras-hub paths through the
// name maps, and what a plan cannot express refused by rule.
#include "meshlayout/rules/rule_dialects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using namespace rules_test;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

TEST(RuleDialects, KerasHubMegatronRulesAsAnHfPlan) {
  std::string text = read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_megatron.json");
  ConvertOptions o = with_names(HfNames::kKerasHub);
  std::string plan = convert_rules(text, RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, o,
                                   "llama_megatron.json");
  EXPECT_EQ(nlohmann::json::parse(plan), nlohmann::json::parse(R"({
    "embed_tokens": "colwise", "layers.*.self_attn.q_proj": "colwise",
    "layers.*.self_attn.k_proj": "colwise", "layers.*.self_attn.v_proj": "colwise",
    "layers.*.self_attn.o_proj": "rowwise", "layers.*.mlp.gate_proj": "colwise",
    "layers.*.mlp.up_proj": "colwise", "layers.*.mlp.down_proj": "rowwise",
    "lm_head": "colwise"})"))
      << plan;
  // keras-hub's own map splits on two axes: refused, naming the rule and the axis.
  std::string two_axes = read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_keras_hub.json");
  EXPECT_THAT(rules_test::error_of([&] {
                convert_rules(two_axes, RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, o,
                              "llama_keras_hub.json");
              }),
              HasSubstr("rules[0] ('token_embedding/embeddings')"));
  EXPECT_THAT(rules_test::error_of([&] {
                convert_rules(two_axes, RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, o,
                              "llama_keras_hub.json");
              }),
              HasSubstr("split on mesh axis 'batch'"));
}

TEST(RuleDialects, WhatAnHfPlanCannotExpressIsRefusedByRule) {
  ConvertOptions o = with_names(HfNames::kKerasHub);
  auto hf_of = [&](const char* keras_json) {
    return rules_test::error_of([&] {
      convert_rules(keras_json, RulesDialect::kKerasHub, RulesDialect::kHfTpPlan, o, "k.json");
    });
  };
  EXPECT_THAT(hf_of(R"({"feedforward_gate_dense/kernel": [null, ["batch", "model"]]})"),
              HasSubstr("split over several mesh axes (batch, model)"));
  EXPECT_THAT(hf_of(R"({"query/kernel": [null, null, "model"]})"),
              HasSubstr("a minor part of a Hugging Face dimension (head_dim"));
  EXPECT_THAT(
      hf_of(R"({"transformer_layer_1/self_attention/query/kernel": [null, "model", null]})"),
      HasSubstr("one style"));
  EXPECT_THAT(hf_of(R"({"no_such_layer/kernel": [null, "model"]})"),
              HasSubstr("matches no variable of the llama family's keras-hub name map"));
  EXPECT_THAT(hf_of(R"({"query/kernel": [null, "model", null], "query/bias": [null, null]})"),
              HasSubstr("keeps the bias whole"));
  // Experts: split on the stacked experts (expert parallelism) no HF tensor-parallel style
  // expresses; a rule for the first sparse block's name only leaves the later ones whole.
  ConvertOptions m = with_names(HfNames::kKerasHub, "mixtral");
  auto mixtral_hf_of = [&](const char* keras_json) {
    return rules_test::error_of([&] {
      convert_rules(keras_json, RulesDialect::kKerasHub, RulesDialect::kHfTpPlan, m, "k.json");
    });
  };
  EXPECT_THAT(
      mixtral_hf_of(R"({"expert_feedforward_gate_dense": ["model", null, null]})"),
      HasSubstr("splits dimension 0 of 'transformer_layer_0/mixtral_sparse_moe_block/experts/"
                "expert_feedforward_gate_dense', the stacked experts"));
  EXPECT_THAT(
      mixtral_hf_of(R"({"mixtral_sparse_moe_block/experts/expert_feedforward_gate_dense":
                        [null, null, "model"]})"),
      HasSubstr("gets no rule (replicated); a Hugging Face plan gives every layer and expert of "
                "'model.layers.*.block_sparse_moe.experts.*.w1.weight' one style"));
  EXPECT_EQ(nlohmann::json::parse(convert_rules(
                R"({"expert_feedforward_(gate|intermediate)_dense": [null, null, "model"],
                    "expert_feedforward_output_dense": [null, "model", null]})",
                RulesDialect::kKerasHub, RulesDialect::kHfTpPlan, m, "k.json")),
            nlohmann::json::parse(R"({"layers.*.block_sparse_moe.experts.*.w1": "colwise",
                                      "layers.*.block_sparse_moe.experts.*.w3": "colwise",
                                      "layers.*.block_sparse_moe.experts.*.w2": "rowwise"})"));
  // On HF names: a regex becomes the plan keys of the tensors it decides, or is refused.
  ConvertOptions h = with_names(HfNames::kHf);
  std::vector<std::string> warnings;
  EXPECT_EQ(nlohmann::json::parse(convert_rules(
                R"({"rules": [["layers.*(q|k)_proj.weight", ["model", null]],
                              ["o_proj.weight", [null, "model"]]]})",
                RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, h, "m.json", &warnings)),
            nlohmann::json::parse(R"({"layers.*.self_attn.q_proj": "colwise",
                                      "layers.*.self_attn.k_proj": "colwise",
                                      "layers.*.self_attn.o_proj": "rowwise"})"));
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("written as the 2 variables of the llama family's name map"));
  EXPECT_THAT(warnings[1], HasSubstr("('o_proj.weight'): pattern 'o_proj.weight' is no path for "
                                     "a Hugging Face plan: written as the 1 variable"));
  EXPECT_THAT(rules_test::error_of([&] {
                convert_rules(R"({"rules": [["^model\\.experts\\.weight$",
                                             ["model", null, null]]]})",
                              RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, h, "m.json");
              }),
              HasSubstr("splits dimension 0 of the rank-3 weight of module 'model.experts'"));
  EXPECT_THAT(rules_test::error_of([&] {
                convert_rules(R"({"rules": [["layers.*conv.weight", ["model", null]]]})",
                              RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, h, "m.json");
              }),
              HasSubstr("uses regex features"));
  EXPECT_THAT(rules_test::error_of([&] {
                convert_rules(R"({"rules": [["^model\\.embed_tokens$", ["model", null]]]})",
                              RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, h, "m.json");
              }),
              HasSubstr("is not a module's .weight or .bias"));
}

}  // namespace
}  // namespace meshlayout
