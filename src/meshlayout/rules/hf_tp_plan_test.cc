#include "meshlayout/rules/rule_dialects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/random_llama.h"
#include "meshlayout/models/random_moe_hf.h"
#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using namespace rules_test;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

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
      ASSERT_EQ(warnings.size(), 1u);  // the router's weight (its name map: no bias)
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

// One model's exact name map (use_model_config): the small mixtures' plans round-trip through
// their keras-hub paths, every layer of the model checked. A model without dense layers (the
// small Qwen 3 MoE) has no keras-hub path for the plan's dense keys: refused by key.
TEST(RuleDialects, MoePlansRoundTripOnOneModelsPaths) {
  {
    ConvertOptions o = with_names(HfNames::kKerasHub);
    use_model_config(o, LlamaConfig::from_json(small_hf_moe_spec("qwen3_moe").to_json()));
    EXPECT_THAT(error_of([&] {
                  convert_rules(kQwenMoePlan, RulesDialect::kHfTpPlan, RulesDialect::kKerasHub, o,
                                "plan.json");
                }),
                HasSubstr("plan key 'layers.*.mlp.gate_proj': the qwen3_moe family's name map "
                          "has no module 'model.layers.*.mlp.gate_proj'"));
  }
  for (const char* family : {"mixtral", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    const LlamaConfig c = LlamaConfig::from_json(small_hf_moe_spec(family).to_json());
    ConvertOptions o = with_names(HfNames::kKerasHub);
    use_model_config(o, c);
    EXPECT_EQ(o.family, family);
    const char* plan = std::string_view(family) == "mixtral" ? kMixtralPlan : kQwenMoePlan;
    const std::string keras =
        convert_rules(plan, RulesDialect::kHfTpPlan, RulesDialect::kKerasHub, o, "plan.json");
    EXPECT_EQ(convert_rules(keras, RulesDialect::kKerasHub, RulesDialect::kHfTpPlan, o, "k.json"),
              plain_styles(plan))
        << keras;
  }
}

TEST(RuleDialects, ExampleLlamaPlanIsTheDensePlan) {
  std::string text = read_file(MESHLAYOUT_SOURCE_DIR "/examples/rules/llama_hf_tp_plan.json");
  ConvertOptions o;
  EXPECT_EQ(convert_rules(text, RulesDialect::kHfTpPlan, RulesDialect::kHfTpPlan, o, "x"),
            kDensePlan);
}

// The layout a family's HF plan means for each HF tensor (documented semantics: colwise
// splits dim 0 of the (out, in) weight and the bias, rowwise dim 1 of the weight and not the
// bias; unnamed modules are replicated). Mixtral's plan: each expert's w1/w3 colwise, w2
// rowwise, the router colwise_rep; the Qwen mixtures': each expert's and the dense layers'
// gate/up colwise and down rowwise, the router and Qwen 2's shared expert not named.
Shape plan_split(const std::string& hf_name) {
  auto has = [&](const std::string& part) { return hf_name.find(part) != std::string::npos; };
  if (has(".shared_expert")) return {};
  for (const char* col : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "w1", "w3",
                          "block_sparse_moe.gate"}) {
    if (has(std::string(".") + col + ".weight") || has(std::string(".") + col + ".bias")) {
      return {0};
    }
  }
  for (const char* row : {"o_proj", "down_proj", "w2"}) {
    if (has(std::string(".") + row + ".weight")) return {1};
  }
  return {};
}

// The box of HF tensor `m.hf_name` that a box of its keras variable covers (keras -> view ->
// HF; for a stacked variable's slice, the part of the box in slice m.stack_index).
Box keras_box_to_hf(const HfWeightMapping& m, Box keras) {
  const size_t skip = m.stack_index >= 0 ? 1 : 0;
  if (skip == 1) {  // the experts are keras dimension 0 (view dimension 0)
    EXPECT_EQ(m.perm[0], 0) << m.hf_name;
    EXPECT_LE(keras.offset[0], m.stack_index) << m.hf_name;
    EXPECT_GT(keras.offset[0] + keras.shape[0], m.stack_index) << m.hf_name;
    keras.offset[0] = 0;
    keras.shape[0] = 1;
  }
  Shape view_off(m.view_shape.size()), view_len(m.view_shape.size());
  for (size_t i = 0; i < m.perm.size(); ++i) {
    view_off[static_cast<size_t>(m.perm[i])] = keras.offset[i];
    view_len[static_cast<size_t>(m.perm[i])] = keras.shape[i];
  }
  Box hf{Shape(m.hf_shape.size()), Shape(m.hf_shape.size())};
  size_t v = skip;
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

struct FamilyModel {
  LlamaConfig config;
  const char* plan;
  int splits;  // tensors the plan splits (keras-hub variables counted per HF tensor)
};

// Every family with each weight it may have: Llama with attention_bias (o_proj bias: rowwise,
// whole), Mistral, Qwen 2's q/k/v biases (colwise: split on their heads), Qwen 3's head norms
// (under its later plan: replicated), Gemma's heads-first q/k/v kernels, Gemma 2's post norms,
// Gemma 3's head norms, untied lm_heads; the mixtures of experts of models/random_moe_hf.h
// (Mixtral: 2 layers of 4 experts; Qwen 3 MoE: 2 layers of 8; Qwen 2 MoE: 2 sparse layers of
// 4 experts with a shared expert, and a dense layer).
std::vector<FamilyModel> family_models() {
  std::vector<FamilyModel> out;
  for (const char* family :
       {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"}) {
    LlamaConfig c{.vocab_size = 64,
                  .hidden_size = 32,
                  .intermediate_size = 48,
                  .num_hidden_layers = 3,
                  .num_attention_heads = 4,
                  .num_key_value_heads = 4,
                  .head_dim = 8,
                  .max_position_embeddings = 64};
    c.family = family;
    c.attention_bias = c.family == "llama";
    if (c.gemma()) c.query_pre_attn_scalar = 8;  // Gemma: heads-first q/k/v kernels
    if (c.family == "gemma3_text") {
      c.sliding_window_pattern = 3;
      c.rope_local_base_freq = 10000;
    }
    const int biases = c.family == "llama" || c.family == "qwen2" ? 3 : 0;  // q/k/v
    out.push_back({c, c.family == "qwen3" ? kQwen3NormPlan : kDensePlan, (7 + biases) * 3});
  }
  // Per sparse layer q/k/v/o and each expert's three kernels (Mixtral: and the router).
  out.push_back({LlamaConfig{}, kMixtralPlan, 2 * (4 + 1 + 3 * 4)});
  out.push_back({LlamaConfig{}, kQwenMoePlan, 2 * (4 + 3 * 8)});
  out.push_back({LlamaConfig{}, kQwenMoePlan, 2 * (4 + 3 + 3 * 4) + (4 + 3 + 3)});  // biases
  const char* moe[] = {"mixtral", "qwen3_moe", "qwen2_moe"};
  for (size_t i = 0; i < 3; ++i) {
    out[out.size() - 3 + i].config.family = moe[i];
  }
  return out;
}

TEST(RuleDialects, FamilyPlansGiveEveryTensorTheLayoutThePlanMeans) {
  for (const FamilyModel& f : family_models()) {
    const std::string family = f.config.family;
    SCOPED_TRACE(family);
    // Every tensor of the small model as written to disk (models/random_llama.h; the
    // mixtures as the Hub ships them, models/random_moe_hf.h).
    const std::string dir =
        ::testing::TempDir() + "rules_family_" + family + "_" + std::to_string(getpid());
    const bool moe = family == "mixtral" || family.ends_with("_moe");
    if (moe) {
      const HfMoeSpec spec = small_hf_moe_spec(family);
      write_hf_moe(dir, spec, random_hf_moe_tensors(spec, 7));
    } else {
      write_random_hf_llama(dir, f.config);
    }
    const HfLlamaCheckpoint checkpoint = HfLlamaCheckpoint::open(dir);
    std::filesystem::remove_all(dir);
    // The mixtures have 2 key/value heads: a 2-way model axis keeps whole heads.
    const DeviceMesh mesh =
        moe ? DeviceMesh({4, 2}, {"batch", "model"}) : DeviceMesh({2, 4}, {"batch", "model"});
    for (HfNames names : {HfNames::kHf, HfNames::kKerasHub}) {
      ConvertOptions o = with_names(names, family);
      const LayoutMap map =
          read_rules(f.plan, RulesDialect::kHfTpPlan, o, "plan.json").to_layout_map();
      int split = 0;
      for (const HfWeightMapping& m : checkpoint.mappings()) {
        SCOPED_TRACE(m.hf_name);
        // The plan's layout of the HF tensor.
        std::vector<DimSharding> want(m.hf_shape.size());
        for (int64_t d : plan_split(m.hf_name)) want[static_cast<size_t>(d)] = "model";
        split += plan_split(m.hf_name).empty() ? 0 : 1;
        const std::string& path = names == HfNames::kHf ? m.hf_name : m.keras_path;
        std::optional<TensorLayout> got = map.get(path);
        if (names == HfNames::kHf) {
          EXPECT_EQ(got ? got->axes() : std::vector<DimSharding>(m.hf_shape.size()), want);
          continue;
        }
        // keras-hub: every device's keras box is exactly its box of the HF tensor.
        const Shape& shape = m.variable_shape();
        TensorLayout keras = got ? *got : TensorLayout::replicated(static_cast<int>(shape.size()));
        keras.set_device_mesh(mesh);
        ShardGeometry kg(keras, shape);
        ShardGeometry hg(TensorLayout(want, mesh), m.hf_shape);
        for (int64_t dev = 0; dev < mesh.size(); ++dev) {
          EXPECT_EQ(keras_box_to_hf(m, kg.box(dev)), hg.box(dev)) << "device " << dev;
        }
      }
      EXPECT_EQ(split, f.splits);
    }
  }
}

TEST(RuleDialects, ReshapedSplitsTheAxisDoesNotDivideAreWarned) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  for (int64_t heads : {6, 8}) {
    SCOPED_TRACE(heads);
    LlamaConfig c{.vocab_size = 64,
                  .hidden_size = 32,
                  .intermediate_size = 48,
                  .num_hidden_layers = 2,
                  .num_attention_heads = heads,
                  .num_key_value_heads = heads / 2,
                  .head_dim = 8,
                  .max_position_embeddings = 64};
    ConvertOptions o = with_names(HfNames::kKerasHub);
    o.mesh = mesh;
    o.model_mappings = hf_llama_weight_mappings(c);
    RuleSet r = read_rules(kDensePlan, RulesDialect::kHfTpPlan, o, "plan.json");
    std::vector<std::string> back;
    write_rules(r, RulesDialect::kHfTpPlan, o, &back);
    if (heads == 8) {  // 8 query and 4 key/value heads on 4 devices: the same rows
      EXPECT_TRUE(r.warnings.empty());
      EXPECT_TRUE(back.empty());
      continue;
    }
    // q, k, v (3 key/value heads) and o_proj; the MLP has no reshape.
    ASSERT_EQ(r.warnings.size(), 4u);
    EXPECT_THAT(r.warnings[0],
                HasSubstr("plan.json plan key 'layers.*.self_attn.q_proj' (colwise): "
                          "'model.layers.0.self_attn.q_proj.weight' dimension 0 is 6 x 8"));
    EXPECT_THAT(r.warnings[0], HasSubstr("split 4 ways on 'model', Hugging Face cuts the flat 48 "
                                         "rows in blocks of 12 but keras-hub's "
                                         "'transformer_layer_0/self_attention/query/kernel' "
                                         "splits the 6 whole units in blocks of 2"));
    EXPECT_THAT(r.warnings[3], HasSubstr("o_proj.weight' dimension 1 is 6 x 8"));
    ASSERT_EQ(back.size(), 4u);  // and the other way
    EXPECT_THAT(back[0], HasSubstr("q_proj.weight' dimension 0 is 6 x 8"));
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
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_THAT(r.warnings[0], HasSubstr("'layers.*.x' (local): Hugging Face's IsolatedParallel "
                                       "divides"));
  EXPECT_THAT(r.warnings[1], HasSubstr("'layers.*.x' (local): module 'model.layers.*.x' is not in "
                                       "the llama family's name map; taken as an nn.Linear"));
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
  ConvertOptions k = with_names(HfNames::kKerasHub, "qwen3_moe");
  EXPECT_THAT(
      error_of([&] { read_rules(kMixtralPlan, RulesDialect::kHfTpPlan, k, "mixtral.json"); }),
      HasSubstr("the qwen3_moe family's name map has no module "
                "'model.layers.*.block_sparse_moe.gate'"));
  EXPECT_THAT(error_of([&] {
                read_rules(R"({"layers.*.mlp.experts": "moe_tp_experts"})", RulesDialect::kHfTpPlan,
                           k, "plan.json");
              }),
              HasSubstr("'layers.*.mlp.experts': the Hugging Face style 'moe_tp_experts' "
                        "(packed or expert-parallel weights)"));
}

}  // namespace
}  // namespace meshlayout
