#include "meshlayout/models/family_layout_maps.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/models/random_moe_hf.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

const DeviceMesh kMesh({2, 4}, {"batch", "model"});

LayoutMap rules_file(const std::string& name) {
  RulesFile file = load_rules_file(std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/" + name);
  file.mesh = kMesh;
  return file.to_layout_map();
}

// Every family's keras-hub rules file says what the family's get_layout_map says, rule for rule.
TEST(FamilyLayoutMaps, KerasHubRulesFilesEqualTheFunctions) {
  const std::pair<const char*, LayoutMap> files[] = {
      {"llama_keras_hub.json", llama_layout_map(kMesh)},
      {"mistral_keras_hub.json", llama_layout_map(kMesh)},
      {"qwen_keras_hub.json", qwen_layout_map(kMesh)},
      {"gemma_keras_hub.json", gemma_layout_map(kMesh)},
      {"mixtral_keras_hub.json", mixtral_layout_map(kMesh)},
      {"qwen3_moe_keras_hub.json", qwen3_moe_layout_map(kMesh)},
      {"qwen2_moe_keras_hub.json", qwen2_moe_layout_map(kMesh)}};
  for (const auto& [name, want] : files) {
    SCOPED_TRACE(name);
    EXPECT_EQ(rules_file(name).rules(), want.rules());
  }
}

// family_layout_map picks each family's function, and every rule of it matches a variable of a
// model of that family (no rule is dead weight).
TEST(FamilyLayoutMaps, EachFamilyGetsItsOwnRulesAndEveryRuleIsUsed) {
  for (const char* family : {"mixtral", "qwen3_moe", "qwen2_moe"}) {
    SCOPED_TRACE(family);
    LlamaConfig config = LlamaConfig::from_json(small_hf_moe_spec(family).to_json());
    config.mlp_only_layers = {0};  // a dense layer, whose rules Qwen's maps also carry
    config.tie_word_embeddings = false;
    const LayoutMap rules = family_layout_map(config, kMesh);
    const std::string name = family;
    const LayoutMap want = name == "mixtral"     ? mixtral_layout_map(kMesh)
                           : name == "qwen3_moe" ? qwen3_moe_layout_map(kMesh)
                                                 : qwen2_moe_layout_map(kMesh);
    EXPECT_EQ(rules.rules(), want.rules());
    clear_session();
    LlamaModel model(config, LayoutMap(kMesh));
    std::vector<bool> used(rules.rules().size(), false);
    for (const auto& [path, variable] : model.variables_by_path()) {
      for (size_t hit : rules.explain(path).regex_hits) used[hit] = true;
    }
    for (size_t i = 0; i < used.size(); ++i) EXPECT_TRUE(used[i]) << rules.rules()[i].pattern;
  }
}

TEST(FamilyLayoutMaps, RefuseAxesTheMeshLacksNamingTheFunctionAndTheAxis) {
  try {
    qwen2_moe_layout_map(kMesh, "tensor", "batch");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("qwen2_moe_layout_map"));
    EXPECT_THAT(e.what(), HasSubstr("'tensor' is not an axis of"));
    EXPECT_THAT(e.what(), HasSubstr("batch, model"));
  }
  EXPECT_THROW(mixtral_layout_map(kMesh, "model", "data"), ValueError);
}

}  // namespace
}  // namespace meshlayout
