// keras-hub's and meshlayout's files (keras_hub_rules.cc) read and written.
#include "meshlayout/rules/rule_dialects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using namespace rules_test;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

TEST(RuleDialects, KerasHubAndMeshlayoutFilesRoundTrip) {
  ConvertOptions o;
  for (const char* name :
       {"llama_keras_hub.json", "llama_megatron.json", "qwen_keras_hub.json", "qwen_megatron.json",
        "mistral_keras_hub.json", "gemma_keras_hub.json", "mixtral_keras_hub.json",
        "mixtral_expert_parallel.json", "qwen3_moe_keras_hub.json", "qwen2_moe_keras_hub.json"}) {
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

TEST(RuleDialects, KerasHubReadsTheDictAsPythonPrintsIt) {
  ConvertOptions o;
  // The layout map as print({k: v.axes for k, v in layout_map.items()}) shows it.
  const char* python = R"({'token_embedding/embeddings': ('model', 'batch'),
    'transformer_layer.*self_attention.*(query|key|value).kernel': ('model', 'batch', None),
    r'transformer_layer_\d+/feedforward_output_dense/kernel': ("model", None),  # raw
    'layer_\d+/x\.y': [('data', 'model'), None],  # an unknown escape is kept, as Python does
    'it\'s': ('model',),
})";
  RuleSet r = read_rules(python, RulesDialect::kKerasHub, o, "map.py");
  ASSERT_EQ(r.rules.size(), 5u);
  EXPECT_EQ(r.rules[0].layout, (std::vector<DimSharding>{"model", "batch"}));
  EXPECT_EQ(r.rules[1].layout, (std::vector<DimSharding>{"model", "batch", std::nullopt}));
  EXPECT_EQ(r.rules[2].pattern, "transformer_layer_\\d+/feedforward_output_dense/kernel");
  EXPECT_EQ(r.rules[3].pattern, "layer_\\d+/x\\.y");
  EXPECT_EQ(r.rules[3].layout, (std::vector<DimSharding>{{"data", "model"}, std::nullopt}));
  EXPECT_EQ(r.rules[4].pattern, "it's");
  // Written as JSON, read back the same.
  RuleSet back = read_rules(write_rules(r, RulesDialect::kKerasHub, o), RulesDialect::kKerasHub, o,
                            "map.json");
  ASSERT_EQ(back.rules.size(), r.rules.size());
  for (size_t i = 0; i < r.rules.size(); ++i) {
    EXPECT_EQ(back.rules[i].pattern, r.rules[i].pattern);
    EXPECT_EQ(back.rules[i].layout, r.rules[i].layout);
  }
  // Neither JSON nor Python: both readings' errors, with the line and column.
  std::string e = rules_test::error_of(
      [&] { read_rules("{'a': ('model', 'batch'}", RulesDialect::kKerasHub, o, "map.py"); });
  EXPECT_THAT(e, HasSubstr("(read as JSON); map.py:1:24: not a Python dict literal of layouts: "
                           "expected ',' or ')' (read as Python)"));
  EXPECT_THAT(rules_test::error_of([&] {
                read_rules("{'a': ('m',), 'a': ('m',)}", RulesDialect::kKerasHub, o, "map.py");
              }),
              HasSubstr("the key 'a' given twice"));
  EXPECT_THAT(rules_test::error_of(
                  [&] { read_rules("{'a': (True,)}", RulesDialect::kKerasHub, o, "map.py"); }),
              HasSubstr("unexpected 'T'; expected a string, None, a tuple, a list or a dict"));
}

}  // namespace
}  // namespace meshlayout
