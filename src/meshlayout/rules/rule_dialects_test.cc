#include "meshlayout/rules/rule_dialects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshlayout/rules/rules_test_util.h"

namespace meshlayout {
namespace {

using namespace rules_test;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

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
