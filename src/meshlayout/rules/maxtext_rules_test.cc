#include "meshlayout/rules/rule_dialects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using namespace rules_test;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

constexpr const char* kLlamaMaxText =
    R"(# Flax/MaxText logical axis rules (meshlayout rules convert)
'mesh_axes': ['data', 'fsdp', 'tensor']
'logical_axis_rules':
  - ['vocab', ['tensor', 'fsdp']]
  - ['embed', 'fsdp']
  - ['heads', 'tensor']
  - ['mlp', 'tensor']
  - ['kv', null]
  - ['norm', null]
'logical_axes':
  'token_embedding/embeddings': ['vocab', 'embed']
  'transformer_layer_*/self_attention/query/kernel': ['embed', 'heads', 'kv']
  'transformer_layer_*/self_attention/attention_output/kernel': ['heads', 'kv', 'embed']
  'transformer_layer_*/feedforward_gate_dense/kernel': ['embed', 'mlp']
  'transformer_layer_*/feedforward_output_dense/kernel': ['mlp', 'embed']
  'transformer_layer_*/self_attention_layernorm/scale': ['norm']
)";

TEST(RuleDialects, MaxTextRoundTripsAndFollowsFlaxPrecedence) {
  ConvertOptions o;
  RuleSet r = read_rules(kLlamaMaxText, RulesDialect::kMaxText, o, "llama.yml");
  EXPECT_EQ(write_rules(r, RulesDialect::kMaxText, o), kLlamaMaxText);
  ASSERT_EQ(r.rules.size(), 6u);
  // vocab takes tensor and fsdp, so embed's fsdp is taken: that dimension stays whole.
  EXPECT_EQ(r.rules[0].layout, (std::vector<DimSharding>{{"tensor", "fsdp"}, std::nullopt}));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("'token_embedding/embeddings': dimension 1 (embed) is "
                                       "not split: logical_axis_rules[1] (embed -> fsdp) was "
                                       "skipped: 'fsdp' already splits another "
                                       "dimension of this tensor"));
  EXPECT_EQ(r.rules[1].pattern, "^transformer_layer_\\d+/self_attention/query/kernel$");
  EXPECT_EQ(r.rules[1].layout, (std::vector<DimSharding>{"fsdp", "tensor", std::nullopt}));
  EXPECT_EQ(r.rules[2].layout, (std::vector<DimSharding>{"tensor", std::nullopt, "fsdp"}));
  // Through a LayoutMap the logical names are gone; written again they are derived from the
  // axes, and read back they give the same layouts.
  RuleSet via_map = RuleSet::from_layout_map(r.to_layout_map());
  std::string derived = write_rules(via_map, RulesDialect::kMaxText, o);
  RuleSet again = read_rules(derived, RulesDialect::kMaxText, o, "derived.yml");
  ASSERT_EQ(again.rules.size(), r.rules.size());
  for (size_t i = 0; i < r.rules.size(); ++i) {
    EXPECT_EQ(again.rules[i].pattern, r.rules[i].pattern);
    EXPECT_EQ(again.rules[i].layout, r.rules[i].layout);
  }
  EXPECT_EQ(write_rules(again, RulesDialect::kMaxText, o), derived);
}

TEST(RuleDialects, FamilyPlansThroughMaxTextAndBack) {
  for (const FamilyPlan& f : kPlans) {
    SCOPED_TRACE(f.family);
    ConvertOptions o = with_names(HfNames::kHf, f.family);
    std::string yaml =
        convert_rules(f.plan, RulesDialect::kHfTpPlan, RulesDialect::kMaxText, o, "plan.json");
    // MaxText -> MaxText is the identity, and MaxText -> HF gives the plan back (colwise_rep
    // and replicated_with_grad_allreduce aside: MaxText holds parameters' layouts only).
    EXPECT_EQ(convert_rules(yaml, RulesDialect::kMaxText, RulesDialect::kMaxText, o, "m.yml"),
              yaml);
    // Through a LayoutMap object too: the logical names derived again are the same.
    const LayoutMap map = read_rules(yaml, RulesDialect::kMaxText, o, "m.yml").to_layout_map();
    EXPECT_EQ(write_rules(RuleSet::from_layout_map(map), RulesDialect::kMaxText, o), yaml);
    EXPECT_EQ(convert_rules(yaml, RulesDialect::kMaxText, RulesDialect::kHfTpPlan, o, "m.yml"),
              plain_styles(f.plan))
        << yaml;
  }
}

// The same on keras-hub paths, through each family's name map (the mixtures' stacked expert
// kernels and their sparse blocks' two names among them).
TEST(RuleDialects, FamilyPlansThroughMaxTextOnKerasHubPathsAndBack) {
  for (const FamilyPlan& f : kPlans) {
    if (!f.keras_hub) continue;
    SCOPED_TRACE(f.family);
    ConvertOptions o = with_names(HfNames::kKerasHub, f.family);
    std::string yaml =
        convert_rules(f.plan, RulesDialect::kHfTpPlan, RulesDialect::kMaxText, o, "plan.json");
    EXPECT_EQ(convert_rules(yaml, RulesDialect::kMaxText, RulesDialect::kMaxText, o, "m.yml"),
              yaml);
    const LayoutMap map = read_rules(yaml, RulesDialect::kMaxText, o, "m.yml").to_layout_map();
    EXPECT_EQ(write_rules(RuleSet::from_layout_map(map), RulesDialect::kMaxText, o), yaml);
    EXPECT_EQ(convert_rules(yaml, RulesDialect::kMaxText, RulesDialect::kHfTpPlan, o, "m.yml"),
              plain_styles(f.plan))
        << yaml;
    if (std::string_view(f.family) == "mixtral") {
      EXPECT_THAT(yaml, HasSubstr("'transformer_layer_*/mixtral_sparse_moe_block_*/experts/"
                                  "expert_feedforward_gate_dense': [null, null, "));
    }
  }
}

// A MaxText-style config: the rules among other settings (which are named and not read),
// flow lists over several lines with trailing commas, a logical name given several rules in
// order of precedence, [] for no axis.
TEST(RuleDialects, MaxTextConfigWithOtherSettings) {
  const char* config = R"(# training config
run_name: ""
checkpoint_period: 10_000
normalization_layer_epsilon: 1.e-05
mlp_activations: ["silu", "linear"]
remat_policy: 'full'   # comment
mesh_axes: ['data', 'fsdp', 'sequence', 'tensor']
logical_axis_rules: [
                      ['activation_batch', ['data', 'fsdp',]],
                      ['mlp', ['tensor', 'sequence']],
                      ['embed', ['fsdp', 'sequence']],
                      ['embed', ['fsdp']],
                      ['heads', 'tensor'],
                      ['kv', []],
                    ]
data_sharding: [['data', 'fsdp', 'sequence', 'tensor']]
logical_axes:
  decoder/layers_*/mlp/wi/kernel: [embed, mlp]
  decoder/layers_*/self_attention/query/kernel: [embed, heads, kv]
)";
  ConvertOptions o;
  RuleSet r = read_rules(config, RulesDialect::kMaxText, o, "base.yml");
  ASSERT_EQ(r.rules.size(), 2u);
  // mlp takes tensor and sequence, so embed falls back to its second rule: fsdp alone.
  EXPECT_EQ(r.rules[0].layout, (std::vector<DimSharding>{"fsdp", {"tensor", "sequence"}}));
  EXPECT_EQ(r.rules[1].layout,
            (std::vector<DimSharding>{{"fsdp", "sequence"}, "tensor", std::nullopt}));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("are not read: 'run_name', 'checkpoint_period', "
                                       "'normalization_layer_epsilon', 'mlp_activations', "
                                       "'remat_policy', 'data_sharding'"));
  // Written back: the rules read, the settings not.
  const std::string yaml = write_rules(r, RulesDialect::kMaxText, o);
  EXPECT_EQ(read_rules(yaml, RulesDialect::kMaxText, o, "w.yml").rules[0].layout,
            r.rules[0].layout);
  EXPECT_THAT(yaml, ::testing::Not(HasSubstr("run_name")));
}

TEST(RuleDialects, BadMaxTextIsNamed) {
  ConvertOptions o;
  auto read = [&](const std::string& text) {
    return error_of([&] { read_rules(text, RulesDialect::kMaxText, o, "m.yml"); });
  };
  EXPECT_THAT(read("logical_axis_rules: [['embed', 'fsdp']]\nlogical_axes:\n  w: [embed, mlp]\n"),
              HasSubstr("m.yml logical_axes 'w': logical name 'mlp' (dimension 1) appears in no "
                        "logical_axis_rules entry"));
  EXPECT_THAT(read("logical_axis_rules: [['embed', ['fsdp', 'fsdp']]]\nlogical_axes: {}\n"),
              HasSubstr("logical_axis_rules[0]: mesh axis 'fsdp' is listed twice"));
  EXPECT_THAT(read("logical_axis_rules: [['embed', 'fsdp']\nlogical_axes: {}\n"),
              HasSubstr("m.yml:"));
  EXPECT_THAT(read("logical_axis_rules: [[embed, fsdp]]\nlogical_axes: {w: [embed, embed]}\n"),
              HasSubstr("m.yml logical_axes 'w': logical name 'embed' names dimensions 0 and 1"));
  EXPECT_THAT(read("logical_axis_rules: [['embed']]\nlogical_axes: {}\n"),
              HasSubstr("must be a [logical name, mesh axes] pair"));
  EXPECT_THAT(read("logical_axis_rules: []\n"), HasSubstr("has no logical_axes"));
  EXPECT_THAT(read("mesh_axes: [data]\nlogical_axis_rules: [[embed, fsdp]]\nlogical_axes: {}\n"),
              HasSubstr("mesh axis 'fsdp' is not in mesh_axes (data)"));
  // A regex is no MaxText path: it becomes the name map's variables it decides, or, deciding
  // none, an error naming it.
  EXPECT_THAT(error_of([&] {
                convert_rules(R"({"conv.*kernel": [null, "model"]})", RulesDialect::kKerasHub,
                              RulesDialect::kMaxText, o, "k.json");
              }),
              HasSubstr("k.json rule 'conv.*kernel': pattern 'conv.*kernel' uses regex features "
                        "that MaxText's logical_axes cannot express, and it decides no variable "
                        "of the llama family's name map (layers checked: 0, 1, 2, 3, 7, 31)"));
  EXPECT_THAT(error_of([&] {
                convert_rules(
                    R"({"transformer_layer_[0-3]/.*query/kernel": [null, "model", null]})",
                    RulesDialect::kKerasHub, RulesDialect::kMaxText, o, "k.json");
              }),
              HasSubstr("'transformer_layer_0/self_attention/query/kernel' is decided by rule "
                        "k.json rule 'transformer_layer_[0-3]/.*query/kernel' but "
                        "'transformer_layer_7/self_attention/query/kernel' by no rule"));
  // An unanchored literal becomes an exact path, with a warning.
  std::vector<std::string> warnings;
  convert_rules(R"({"dense/kernel": [null, "model"]})", RulesDialect::kKerasHub,
                RulesDialect::kMaxText, o, "k.json", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("is not anchored"));
}

// keras-hub's own regex rules as MaxText (through the name map) and back: every variable of a
// Llama keeps its layout.
TEST(RuleDialects, KerasHubRegexRulesBecomeMaxTextPathsOfTheirVariables) {
  ConvertOptions o;
  const std::string text = read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_keras_hub.json");
  std::vector<std::string> warnings;
  const std::string yaml = convert_rules(text, RulesDialect::kMeshlayout, RulesDialect::kMaxText, o,
                                         "llama_keras_hub.json", &warnings);
  EXPECT_THAT(yaml, HasSubstr("'transformer_layer_*/self_attention/key/kernel': ['model', "
                              "'batch', null]"));
  // Five regex rules written as their variables; the embeddings' unanchored path made exact.
  ASSERT_EQ(warnings.size(), 6u) << yaml;
  EXPECT_THAT(warnings[0], HasSubstr("written as the 3 variables of the llama family's name map "
                                     "it decides"));
  const LayoutMap back = read_rules(yaml, RulesDialect::kMaxText, o, "back.yml").to_layout_map();
  const LayoutMap original =
      read_rules(text, RulesDialect::kMeshlayout, o, "llama_keras_hub.json").to_layout_map();
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 40,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 8,
                .max_position_embeddings = 64};
  for (const HfWeightMapping& m : hf_llama_weight_mappings(c)) {
    SCOPED_TRACE(m.keras_path);
    const int rank = static_cast<int>(m.keras_shape.size());
    EXPECT_EQ(back.get(m.keras_path).value_or(TensorLayout::replicated(rank)).axes(),
              original.get(m.keras_path).value_or(TensorLayout::replicated(rank)).axes());
  }
}

// Gemma's keras-hub map as MaxText through Gemma's name map, and back: every variable of a
// Gemma 2 keeps its layout.
TEST(RuleDialects, GemmaKerasHubRulesAsMaxText) {
  ConvertOptions o;
  o.family = "gemma2";
  const std::string text = read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/gemma_keras_hub.json");
  std::vector<std::string> warnings;
  const std::string yaml = convert_rules(text, RulesDialect::kMeshlayout, RulesDialect::kMaxText, o,
                                         "gemma_keras_hub.json", &warnings);
  const LayoutMap back = read_rules(yaml, RulesDialect::kMaxText, o, "back.yml").to_layout_map();
  const LayoutMap original =
      read_rules(text, RulesDialect::kMeshlayout, o, "gemma_keras_hub.json").to_layout_map();
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 12,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 16,
                .max_position_embeddings = 64};
  c.family = "gemma2";
  c.query_pre_attn_scalar = 16;
  int split = 0;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(c)) {
    SCOPED_TRACE(m.keras_path);
    const int rank = static_cast<int>(m.keras_shape.size());
    const TensorLayout want = original.get(m.keras_path).value_or(TensorLayout::replicated(rank));
    EXPECT_EQ(back.get(m.keras_path).value_or(TensorLayout::replicated(rank)).axes(), want.axes());
    split += want.axes() != TensorLayout::replicated(rank).axes() ? 1 : 0;
  }
  EXPECT_GE(split, 1 + 7 * 12) << yaml;  // the embeddings and 7 kernels per layer
}

TEST(RuleDialects, MaxTextMegatronExampleEqualsTheMegatronRulesFile) {
  ConvertOptions o;
  const LayoutMap maxtext =
      read_rules(read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_megatron_maxtext.yml"),
                 RulesDialect::kMaxText, o, "llama_megatron_maxtext.yml")
          .to_layout_map();
  const LayoutMap megatron =
      read_rules(read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_megatron.json"),
                 RulesDialect::kMeshlayout, o, "llama_megatron.json")
          .to_layout_map();
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 12,
                .num_attention_heads = 4,
                .num_key_value_heads = 2,
                .head_dim = 8,
                .max_position_embeddings = 64};
  int split = 0;
  for (const HfWeightMapping& m : hf_llama_weight_mappings(c)) {
    SCOPED_TRACE(m.keras_path);
    const int rank = static_cast<int>(m.keras_shape.size());
    const TensorLayout a = maxtext.get(m.keras_path).value_or(TensorLayout::replicated(rank));
    const TensorLayout b = megatron.get(m.keras_path).value_or(TensorLayout::replicated(rank));
    EXPECT_EQ(a.axes(), b.axes());
    split += a.axes() != TensorLayout::replicated(rank).axes() ? 1 : 0;
  }
  EXPECT_EQ(split, 2 + 7 * 12);  // embeddings, reverse embeddings, 7 kernels per layer
}

}  // namespace
}  // namespace meshlayout
