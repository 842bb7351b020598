#include "meshlayout/rules/rule_dialects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/rules/yaml_subset.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

// base_model_tp_plan of transformers' config classes (v4.51-v4.56: LlamaConfig, Qwen2Config,
// MistralConfig, Qwen3Config, GemmaConfig share the dense plan; MixtralConfig's experts).
constexpr const char* kDensePlan = R"({
  "layers.*.self_attn.q_proj": "colwise",
  "layers.*.self_attn.k_proj": "colwise",
  "layers.*.self_attn.v_proj": "colwise",
  "layers.*.self_attn.o_proj": "rowwise",
  "layers.*.mlp.gate_proj": "colwise",
  "layers.*.mlp.up_proj": "colwise",
  "layers.*.mlp.down_proj": "rowwise"
}
)";
constexpr const char* kMixtralPlan = R"({
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

// Qwen3Config's plan in later transformers: the head norms' gradients all-reduced.
constexpr const char* kQwen3NormPlan = R"({
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
std::string plain_styles(std::string plan) {
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
const FamilyPlan kPlans[] = {{"llama", kDensePlan, true},    {"qwen2", kDensePlan, true},
                             {"mistral", kDensePlan, true},  {"qwen3", kDensePlan, true},
                             {"gemma", kDensePlan, false},   {"mixtral", kMixtralPlan, false},
                             {"qwen3", kQwen3NormPlan, true}};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

ConvertOptions with_names(HfNames names, std::string family = "llama") {
  ConvertOptions o;
  o.names = names;
  o.family = std::move(family);
  return o;
}

TEST(RuleDialects, HfPlanRoundTripsOnHfNamesForEveryFamily) {
  for (const FamilyPlan& f : kPlans) {
    SCOPED_TRACE(f.family);
    ConvertOptions o = with_names(HfNames::kHf, f.family);
    RuleSet rules = read_rules(f.plan, RulesDialect::kHfTpPlan, o, "plan.json");
    EXPECT_EQ(write_rules(rules, RulesDialect::kHfTpPlan, o), f.plan);
    // Through a LayoutMap: parameter layouts only, so colwise_rep comes back as colwise
    // (with a warning wherever the style is dropped).
    RuleSet via_map = RuleSet::from_layout_map(rules.to_layout_map());
    EXPECT_EQ(write_rules(via_map, RulesDialect::kHfTpPlan, o), plain_styles(f.plan));
    std::vector<std::string> warnings;
    write_rules(rules, RulesDialect::kMeshlayout, o, &warnings);
    if (std::string(f.family) == "mixtral") {
      ASSERT_EQ(warnings.size(), 2u);  // weight and bias of the router
      EXPECT_THAT(warnings[0], HasSubstr("block_sparse_moe.gate' (colwise_rep)"));
      EXPECT_THAT(warnings[0], HasSubstr("activations"));
    } else {
      EXPECT_EQ(warnings.size(), f.plan == kQwen3NormPlan ? 2u : 0u);
    }
  }
}

TEST(RuleDialects, HfPlanRoundTripsOnKerasHubPaths) {
  for (const FamilyPlan& f : kPlans) {
    if (!f.keras_hub) continue;
    SCOPED_TRACE(f.family);
    ConvertOptions o = with_names(HfNames::kKerasHub, f.family);
    RuleSet rules = read_rules(f.plan, RulesDialect::kHfTpPlan, o, "plan.json");
    EXPECT_EQ(write_rules(rules, RulesDialect::kHfTpPlan, o), f.plan);
    RuleSet via_map = RuleSet::from_layout_map(rules.to_layout_map());
    EXPECT_EQ(write_rules(via_map, RulesDialect::kHfTpPlan, o), plain_styles(f.plan));
    // And through keras-hub's JSON and meshlayout's file.
    for (RulesDialect d : {RulesDialect::kKerasHub, RulesDialect::kMeshlayout}) {
      std::string text = write_rules(rules, d, o);
      EXPECT_EQ(convert_rules(text, d, RulesDialect::kHfTpPlan, o, "x"), plain_styles(f.plan))
          << text;
    }
  }
}

TEST(RuleDialects, ExampleLlamaPlanIsTheDensePlan) {
  std::string text = read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_hf_tp_plan.json");
  ConvertOptions o;
  EXPECT_EQ(convert_rules(text, RulesDialect::kHfTpPlan, RulesDialect::kHfTpPlan, o, "x"),
            kDensePlan);
}

// The layout the Llama's HF plan means for each HF tensor (documented semantics: colwise
// splits dim 0 of the (out, in) weight, rowwise dim 1; unnamed modules are replicated).
Shape plan_split(const std::string& hf_name) {
  for (const char* col : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
    if (hf_name.find(std::string(".") + col + ".weight") != std::string::npos) return {0};
  }
  for (const char* row : {"o_proj", "down_proj"}) {
    if (hf_name.find(std::string(".") + row + ".weight") != std::string::npos) return {1};
  }
  return {};
}

// The box of HF tensor `m.hf_name` that a keras box covers (keras -> view -> HF).
Box keras_box_to_hf(const HfWeightMapping& m, const Box& keras) {
  Shape view_off(m.view_shape.size()), view_len(m.view_shape.size());
  for (size_t i = 0; i < m.perm.size(); ++i) {
    view_off[static_cast<size_t>(m.perm[i])] = keras.offset[i];
    view_len[static_cast<size_t>(m.perm[i])] = keras.shape[i];
  }
  Box hf{Shape(m.hf_shape.size()), Shape(m.hf_shape.size())};
  size_t v = 0;
  for (size_t h = 0; h < m.hf_shape.size(); ++h) {
    int64_t product = 1;
    const size_t first = v;
    while (v < m.view_shape.size() && (v == first || product < m.hf_shape[h])) {
      product *= m.view_shape[v++];
      if (product == m.hf_shape[h]) break;
    }
    int64_t minor = 1;
    for (size_t w = first + 1; w < v; ++w) {
      EXPECT_EQ(view_off[w], 0) << m.hf_name << ": a minor dimension is split";
      EXPECT_EQ(view_len[w], m.view_shape[w]) << m.hf_name;
      minor *= m.view_shape[w];
    }
    hf.offset[h] = view_off[first] * minor;
    hf.shape[h] = view_len[first] * minor;
  }
  return hf;
}

TEST(RuleDialects, LlamaPlanGivesEveryTensorTheLayoutThePlanMeans) {
  LlamaConfig c{.vocab_size = 64,
                .hidden_size = 32,
                .intermediate_size = 48,
                .num_hidden_layers = 3,
                .num_attention_heads = 4,
                .num_key_value_heads = 4,
                .head_dim = 8,
                .max_position_embeddings = 64};
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  for (HfNames names : {HfNames::kHf, HfNames::kKerasHub}) {
    ConvertOptions o = with_names(names);
    const LayoutMap map =
        read_rules(kDensePlan, RulesDialect::kHfTpPlan, o, "plan.json").to_layout_map();
    int split = 0;
    for (const HfWeightMapping& m : hf_llama_weight_mappings(c)) {
      SCOPED_TRACE(m.hf_name);
      // The plan's layout of the HF tensor.
      std::vector<DimSharding> want(m.hf_shape.size());
      for (int64_t d : plan_split(m.hf_name)) want[static_cast<size_t>(d)] = "model";
      const std::string& path = names == HfNames::kHf ? m.hf_name : m.keras_path;
      std::optional<TensorLayout> got = map.get(path);
      if (names == HfNames::kHf) {
        EXPECT_EQ(got ? got->axes() : std::vector<DimSharding>(m.hf_shape.size()), want);
        continue;
      }
      // keras-hub: every device's keras box is exactly its box of the HF tensor.
      TensorLayout keras =
          got ? *got : TensorLayout::replicated(static_cast<int>(m.keras_shape.size()));
      keras.set_device_mesh(mesh);
      ShardGeometry kg(keras, m.keras_shape);
      ShardGeometry hg(TensorLayout(want, mesh), m.hf_shape);
      for (int64_t dev = 0; dev < mesh.size(); ++dev) {
        EXPECT_EQ(keras_box_to_hf(m, kg.box(dev)), hg.box(dev)) << "device " << dev;
      }
      split += plan_split(m.hf_name).empty() ? 0 : 1;
    }
    if (names == HfNames::kKerasHub) {
      EXPECT_EQ(split, 7 * 3);
    }
  }
}

TEST(RuleDialects, HfPlanStylesAndTheirParameters) {
  ConvertOptions o = with_names(HfNames::kHf);
  RuleSet r = read_rules(R"({"layers.*.mlp.up_proj": "local_colwise",
                            "layers.*.self_attn.o_proj": "rowwise_rep",
                            "norm": "sequence_parallel", "lm_head": "colwise_rep",
                            "layers.*.x": "local"})",
                         RulesDialect::kHfTpPlan, o, "p.json");
  // The family's name map says which parameters a module has: no MLP bias, an o_proj bias
  // (attention_bias), a rank-1 norm, no lm_head bias; an unknown module is an nn.Linear.
  ASSERT_EQ(r.rules.size(), 7u);
  EXPECT_EQ(r.rules[0].pattern, "^model\\.layers\\.\\d+\\.mlp\\.up_proj\\.weight$");
  EXPECT_EQ(r.rules[0].layout, (std::vector<DimSharding>{"model", std::nullopt}));
  EXPECT_EQ(r.rules[1].layout, (std::vector<DimSharding>{std::nullopt, "model"}));
  EXPECT_EQ(r.rules[2].pattern, "^model\\.layers\\.\\d+\\.self_attn\\.o_proj\\.bias$");
  EXPECT_EQ(r.rules[2].layout, (std::vector<DimSharding>{std::nullopt}));  // rowwise bias
  EXPECT_EQ(r.rules[3].pattern, "^model\\.norm\\.weight$");
  EXPECT_EQ(r.rules[3].layout, (std::vector<DimSharding>{std::nullopt}));
  EXPECT_EQ(r.rules[4].pattern, "^lm_head\\.weight$");
  EXPECT_EQ(r.rules[4].layout, (std::vector<DimSharding>{"model", std::nullopt}));
  EXPECT_EQ(r.rules[5].layout, (std::vector<DimSharding>{std::nullopt, std::nullopt}));
  EXPECT_EQ(r.rules[6].pattern, "^model\\.layers\\.\\d+\\.x\\.bias$");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("'layers.*.x'"));
  EXPECT_THAT(r.warnings[0], HasSubstr("divides"));
  EXPECT_EQ(write_rules(r, RulesDialect::kHfTpPlan, o),
            "{\n  \"layers.*.mlp.up_proj\": \"local_colwise\",\n  \"layers.*.self_attn.o_proj\": "
            "\"rowwise_rep\",\n  \"norm\": \"sequence_parallel\",\n  \"lm_head\": "
            "\"colwise_rep\",\n  \"layers.*.x\": \"local\"\n}\n");
  // Another tensor-parallel axis name.
  o.tp_axis = "tensor";
  EXPECT_EQ(
      read_rules(R"({"lm_head": "colwise"})", RulesDialect::kHfTpPlan, o, "p").rules[0].layout,
      (std::vector<DimSharding>{"tensor", std::nullopt}));
  // A config.json's base_model_tp_plan.
  EXPECT_EQ(read_rules(R"({"model_type": "llama", "base_model_tp_plan": {"norm": "replicate"}})",
                       RulesDialect::kHfTpPlan, o, "config.json")
                .rules.size(),
            1u);
}

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
  EXPECT_THAT(error_of([&] {
                convert_rules(two_axes, RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, o,
                              "llama_keras_hub.json");
              }),
              HasSubstr("rules[0] ('token_embedding/embeddings')"));
  EXPECT_THAT(error_of([&] {
                convert_rules(two_axes, RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, o,
                              "llama_keras_hub.json");
              }),
              HasSubstr("split on mesh axis 'batch'"));
}

TEST(RuleDialects, WhatAnHfPlanCannotExpressIsRefusedByRule) {
  ConvertOptions o = with_names(HfNames::kKerasHub);
  auto hf_of = [&](const char* keras_json) {
    return error_of([&] {
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
  // On HF names: regex features are no plan key.
  ConvertOptions h = with_names(HfNames::kHf);
  EXPECT_THAT(error_of([&] {
                convert_rules(R"({"rules": [["layers.*q_proj.weight", ["model", null]]]})",
                              RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, h, "m.json");
              }),
              HasSubstr("uses regex features"));
  EXPECT_THAT(error_of([&] {
                convert_rules(R"({"rules": [["^model\\.embed_tokens$", ["model", null]]]})",
                              RulesDialect::kMeshlayout, RulesDialect::kHfTpPlan, h, "m.json");
              }),
              HasSubstr("is not a module's .weight or .bias"));
}

TEST(RuleDialects, BadHfPlansAreNamed) {
  ConvertOptions o;
  auto read = [&](const char* text) {
    return error_of([&] { read_rules(text, RulesDialect::kHfTpPlan, o, "plan.json"); });
  };
  EXPECT_THAT(read(R"({"layers.*.q_proj": "colwize"})"),
              HasSubstr("plan.json plan key 'layers.*.q_proj': unknown Hugging Face style "
                        "'colwize'; expected one of colwise, rowwise"));
  EXPECT_THAT(read(R"({"layers.*.mlp.experts.gate_up_proj": "packed_colwise"})"),
              HasSubstr("'packed_colwise' (packed or expert-parallel weights)"));
  EXPECT_THAT(read(R"({"layers.*.q_proj": "colwise",})"), HasSubstr("plan.json"));
  EXPECT_THAT(read(R"({"layers.*.q_proj": "colwise",})"), HasSubstr("not valid JSON"));
  EXPECT_THAT(read(R"(["colwise"])"), HasSubstr("must be an object {module: style}"));
  EXPECT_THAT(read(R"({"layers.(0|1).q_proj": "colwise"})"), HasSubstr("is not a module name"));
  EXPECT_THAT(read(R"({"layers.*.q_proj": 3})"), HasSubstr("the style must be a string"));
  EXPECT_THAT(read(R"({"norm": "colwise"})"), HasSubstr("splits dimension -2 of a rank-1 weight"));
  ConvertOptions k = with_names(HfNames::kKerasHub);
  EXPECT_THAT(
      error_of([&] { read_rules(kMixtralPlan, RulesDialect::kHfTpPlan, k, "mixtral.json"); }),
      HasSubstr("has no module 'model.layers.*.block_sparse_moe.gate'"));
}

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
                                       "skipped"));
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
    EXPECT_EQ(convert_rules(yaml, RulesDialect::kMaxText, RulesDialect::kHfTpPlan, o, "m.yml"),
              plain_styles(f.plan))
        << yaml;
  }
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
  EXPECT_THAT(read("logical_axis_rules: []\nlogical_axes: {}\nrules: []\n"),
              HasSubstr("unknown key 'rules'"));
  EXPECT_THAT(read("mesh_axes: [data]\nlogical_axis_rules: [[embed, fsdp]]\nlogical_axes: {}\n"),
              HasSubstr("mesh axis 'fsdp' is not in mesh_axes (data)"));
  // Regex features cannot become MaxText paths.
  EXPECT_THAT(
      error_of([&] {
        convert_rules(R"({"dense.*kernel": [null, "model"]})", RulesDialect::kKerasHub,
                      RulesDialect::kMaxText, o, "k.json");
      }),
      HasSubstr("k.json rule 'dense.*kernel': pattern 'dense.*kernel' uses regex features"));
  // An unanchored literal becomes an exact path, with a warning.
  std::vector<std::string> warnings;
  convert_rules(R"({"dense/kernel": [null, "model"]})", RulesDialect::kKerasHub,
                RulesDialect::kMaxText, o, "k.json", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("is not anchored"));
}

TEST(RuleDialects, MeshAxisTwiceAndBadLayoutsAreNamed) {
  ConvertOptions o;
  EXPECT_THAT(error_of([&] {
                read_rules(R"({"a/kernel": ["model", "model"]})", RulesDialect::kKerasHub, o,
                           "k.json");
              }),
              HasSubstr("rule k.json rule 'a/kernel': mesh axis 'model' is used twice for one "
                        "tensor (dimensions 0 and 1"));
  EXPECT_THAT(
      error_of([&] { read_rules(R"({"a/kernel": [3]})", RulesDialect::kKerasHub, o, "k.json"); }),
      HasSubstr("k.json rule 'a/kernel', dimension 0: must be null, a mesh axis name"));
  EXPECT_THAT(
      error_of([&] { read_rules(R"({"(a": [null]})", RulesDialect::kKerasHub, o, "k.json"); }),
      HasSubstr("'(a'"));
  o.mesh = DeviceMesh({2, 4}, {"batch", "model"});
  EXPECT_THAT(error_of([&] {
                read_rules(R"({"a/kernel": ["tensor"]})", RulesDialect::kKerasHub, o, "k.json");
              }),
              HasSubstr("mesh axis 'tensor' is not an axis of the mesh (batch, model)"));
  EXPECT_THAT(error_of([] { parse_rules_dialect("flax"); }),
              HasSubstr("unknown rules dialect 'flax'; expected meshlayout, keras-hub"));
}

TEST(RuleDialects, KerasHubAndMeshlayoutFilesRoundTrip) {
  ConvertOptions o;
  for (const char* name : {"llama_keras_hub.json", "llama_megatron.json", "qwen_keras_hub.json",
                           "qwen_megatron.json", "mistral_keras_hub.json"}) {
    SCOPED_TRACE(name);
    std::string text = read_file(std::string(MESHLAYOUT_SOURCE_DIR "/examples/rules/") + name);
    std::string keras =
        convert_rules(text, RulesDialect::kMeshlayout, RulesDialect::kKerasHub, o, name);
    EXPECT_EQ(convert_rules(keras, RulesDialect::kKerasHub, RulesDialect::kKerasHub, o, "k"),
              keras);
    std::string back =
        convert_rules(keras, RulesDialect::kKerasHub, RulesDialect::kMeshlayout, o, "k");
    EXPECT_EQ(nlohmann::json::parse(back), nlohmann::json::parse(text));
  }
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

TEST(RuleDialects, GlobsAndRegexes) {
  EXPECT_EQ(glob_to_regex("model.layers.*.q_proj.weight"),
            "^model\\.layers\\.\\d+\\.q_proj\\.weight$");
  EXPECT_EQ(regex_to_glob("^model\\.layers\\.\\d+\\.q_proj\\.weight$"),
            "model.layers.*.q_proj.weight");
  EXPECT_EQ(regex_to_glob("layer_[0-9]+/kernel"), "layer_*/kernel");
  EXPECT_EQ(regex_to_glob("dense.*kernel"), std::nullopt);
  EXPECT_EQ(regex_to_glob("(query|key)"), std::nullopt);
  EXPECT_EQ(regex_to_glob("\\w+"), std::nullopt);
}

}  // namespace
}  // namespace meshlayout
