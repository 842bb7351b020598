#include "meshlayout/rules/rule_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/llama_families_test_util.h"
#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class RuleCheck : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  static RuleSet rules(const std::string& text) {
    return read_rules(text, RulesDialect::kMeshlayout, {}, "'r.json'");
  }
  const LlamaConfig config_ = testing::family_base("llama");  // 2 layers, untied
  const std::vector<ModelTensor> tensors_ = model_tensors(config_);
};

int count(const std::vector<std::string>& problems, const std::string& part) {
  int n = 0;
  for (const std::string& p : problems) n += p.find(part) != std::string::npos ? 1 : 0;
  return n;
}

TEST_F(RuleCheck, EveryProblemIsListed) {
  const RuleSet r = rules(R"({"mesh": {"shape": [2, 4], "axis_names": ["batch", "model"]},
    "rules": [["query/kernel", [null, "model", null]],
              ["self_attention/.*/kernel", ["model", null, null]],
              ["embeddings$", ["batch", null]],
              ["feedforward_gate_dense/kernel", [null, null]],
              ["feedforward_output_dense", ["model"]],
              ["feedfoward_intermediate_dense/kernel", [null, "model"]]]})");
  const std::vector<std::string> p = check_rules(r, tensors_, {.min_bytes = 64});
  // Both layers' query kernels match two rules: each is named, with both rules.
  EXPECT_THAT(p, Contains("tensor 'transformer_layer_0/self_attention/query/kernel' matches 2 "
                          "rules: 'r.json' rules[0] ('query/kernel'), 'r.json' rules[1] "
                          "('self_attention/.*/kernel') (mode search refuses the lookup)"));
  EXPECT_EQ(count(p, "query/kernel' matches 2 rules"), 2);
  EXPECT_THAT(p, Contains("tensor 'transformer_layer_1/feedforward_gate_dense/kernel' (32, 48) "
                          "(6144 bytes) is replicated: rule 'r.json' rules[3] "
                          "('feedforward_gate_dense/kernel') gives it [null, null], which splits "
                          "no dimension (more than 64 bytes)"));
  EXPECT_EQ(count(p,
                  "feedforward_output_dense/kernel' (48, 32) (6144 bytes) a layout of 1 "
                  "dimensions [\"model\"], but it has 2"),
            2);
  EXPECT_EQ(count(p,
                  "feedforward_intermediate_dense/kernel' (32, 48) (6144 bytes) is "
                  "replicated: no rule matches it"),
            2);
  EXPECT_THAT(p, Contains("rule 'r.json' rules[5] ('feedfoward_intermediate_dense/kernel') is "
                          "unused: it matches no tensor of the model"));
  // Norm scales (32 floats, 128 bytes): 2 per layer and the final one.
  EXPECT_EQ(count(p, "/scale' (32,) (128 bytes) is replicated"), 5);
  EXPECT_THAT(p, SizeIs(2 + 2 + 2 + 2 + 1 + 5));
  // Above 128 bytes the norms may stay whole.
  EXPECT_THAT(check_rules(r, tensors_, {.min_bytes = 128}), SizeIs(9));
  // The mesh: an axis of size 1 splits nothing; an axis the mesh lacks is named.
  const RuleSet one = rules(R"({"mesh": {"shape": [1, 8], "axis_names": ["batch", "model"]},
    "rules": [["embeddings$", ["batch", null]]]})");
  EXPECT_EQ(count(check_rules(one, tensors_, {.min_bytes = 4096}),
                  "rule 'r.json' rules[0] ('embeddings$') gives it [\"batch\", null], which "
                  "splits only over mesh axes of size 1"),
            2);
  RuleSet other = rules(R"({"rules": [["embeddings$", ["data", null]]]})");
  other.mesh = DeviceMesh::from_string("batch=2,model=4");
  EXPECT_THAT(check_rules(other, tensors_, {.min_bytes = 1 << 20}),
              Contains(HasSubstr("mesh axis 'data' is not an axis of mesh[batch=2,model=4]")));
}

TEST_F(RuleCheck, ModeFirstShadowsSilently) {
  const RuleSet r = rules(R"({"mode": "first", "rules": [
    ["transformer_layer_0/self_attention/", ["model", null, null]],
    ["transformer_layer_0/self_attention/query", [null, "model", null]]]})");
  const std::vector<std::string> p = check_rules(r, tensors_, {.min_bytes = 1 << 20});
  EXPECT_THAT(p, Contains(HasSubstr("'transformer_layer_0/self_attention/query/kernel' matches 2 "
                                    "rules")));
  EXPECT_THAT(p, Contains(HasSubstr("(mode first: the first decides, the others silently lose)")));
  EXPECT_THAT(p, SizeIs(2));
  EXPECT_THAT(p, Contains("rule 'r.json' rules[1] ('transformer_layer_0/self_attention/query') "
                          "is unused: the 1 tensors it matches are decided by earlier rules "
                          "(mode first)"));
}

TEST_F(RuleCheck, KerasHubRulesLeaveTheNormsAndReverseEmbeddingsWhole) {
  const DeviceMesh mesh = DeviceMesh::from_string("batch=2,model=4");
  const RuleSet keras = RuleSet::from_layout_map(family_layout_map(config_, mesh));
  const std::vector<std::string> p = check_rules(keras, tensors_, {.min_bytes = 1000});
  EXPECT_THAT(p, ::testing::ElementsAre(HasSubstr("'token_embedding/reverse_embeddings' (32, "
                                                  "64) (8192 bytes) is replicated: no rule")));
}

TEST_F(RuleCheck, DiffOfAnHfPlanAgainstKerasHubsMap) {
  const DeviceMesh mesh = DeviceMesh::from_string("batch=2,model=4");
  ConvertOptions o;
  use_model_config(o, config_);
  o.names = HfNames::kKerasHub;
  const RuleSet hf = read_rules(rules_test::kDensePlan, RulesDialect::kHfTpPlan, o, "plan.json");
  const RuleSet keras = RuleSet::from_layout_map(family_layout_map(config_, mesh));
  EXPECT_THAT(diff_rules(hf, hf, tensors_), SizeIs(0));
  const std::vector<LayoutDifference> d = diff_rules(hf, keras, tensors_);
  // Every kernel of both layers differs (keras-hub also splits over batch), and the
  // embeddings (the plan leaves them whole).
  EXPECT_THAT(d, SizeIs(2 * 7 + 1));
  const LayoutDifference& q = d[0];
  EXPECT_EQ(q.path, "token_embedding/embeddings");
  EXPECT_EQ(q.a, "replicated");
  EXPECT_EQ(q.b, "[\"model\", \"batch\"]");
  EXPECT_EQ(d[1].path, "transformer_layer_0/self_attention/query/kernel");
  EXPECT_EQ(d[1].a, "[null, \"model\", null]");
  EXPECT_EQ(d[1].b, "[\"model\", \"batch\", null]");
  EXPECT_THAT(d[1].rule_a, HasSubstr("q_proj"));
  // An ambiguous side is shown as such, not thrown.
  const RuleSet both = rules(R"({"rules": [["query", [null, "model", null]],
                                            ["kernel", ["model", null, null]]]})");
  const std::vector<LayoutDifference> a = diff_rules(both, hf, tensors_);
  ASSERT_EQ(a[0].path, "transformer_layer_0/self_attention/query/kernel");
  EXPECT_THAT(a[0].a, HasSubstr("ambiguous: rules 'r.json' rules[0] ('query'), 'r.json' rules[1]"));
}

}  // namespace
}  // namespace meshlayout
