#include "meshlayout/layout_map/rules_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class RulesFileTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

std::string error_of(std::string_view json) {
  try {
    parse_rules_json(json, "r.json");
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST_F(RulesFileTest, ParsesTheDocumentedExample) {
  RulesFile f = parse_rules_json(R"({"mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
      "mode": "search", "rules": [["dense.*kernel", [null, "model"]],
                                  ["emb", [["data", "model"], null]]]})");
  ASSERT_TRUE(f.mesh.has_value());
  EXPECT_EQ(f.mesh->to_string(), "mesh[data=2,model=4]");
  EXPECT_EQ(f.mode, MatchMode::kSearch);
  LayoutMap map = f.to_layout_map();
  EXPECT_EQ(map.get("my/dense_1/kernel")->to_string(), "layout[None,model]@mesh[data=2,model=4]");
  EXPECT_EQ(map.get("emb/embeddings")->to_string(),
            "layout[(data,model),None]@mesh[data=2,model=4]");
  EXPECT_EQ(layout_to_json(*map.get("emb")), R"([["data","model"],null])");
  EXPECT_EQ(f.to_layout_map(MatchMode::kFullmatch).mode(), MatchMode::kFullmatch);
}

TEST_F(RulesFileTest, MeshAndModeAreOptional) {
  RulesFile f = parse_rules_json(R"({"rules": [["a", ["x"]]]})");
  EXPECT_FALSE(f.mesh.has_value());
  EXPECT_EQ(f.mode, MatchMode::kSearch);
  EXPECT_EQ(f.to_layout_map().get("a")->to_string(), "layout[x]");
}

TEST_F(RulesFileTest, ReasonIsAnOptionalThirdElement) {
  RulesFile f = parse_rules_json(R"({"rules": [["a", ["x"], "why a"], ["b", [null]]]})");
  ASSERT_EQ(f.rules.size(), 2u);
  EXPECT_EQ(f.reasons, (std::vector<std::string>{"why a", ""}));
  EXPECT_EQ(f.to_layout_map().get("a")->to_string(), "layout[x]");
}

TEST_F(RulesFileTest, BadJson) {
  EXPECT_THAT(error_of("{\"rules\": [}"), HasSubstr("rules file 'r.json': not valid JSON: "));
}

TEST_F(RulesFileTest, MalformedRuleNamesItsPosition) {
  EXPECT_EQ(error_of(R"({"rules": [["a", [null]], ["b"]]})"),
            "rules file 'r.json': rules[1]: must be a [pattern, layout] pair or a [pattern, "
            "layout, \"reason\"] triple, got a list [\"b\"]");
  EXPECT_EQ(error_of(R"({"rules": [["a", [null], 7]]})"),
            "rules file 'r.json': rules[0]: the reason (third element) must be a string, got a "
            "number 7");
  EXPECT_EQ(error_of(R"({"rules": [["a", [null]], [5, [null]]]})"),
            "rules file 'r.json': rules[1]: the pattern must be a string, got a number 5");
  EXPECT_EQ(error_of(R"({"rules": [["a", [null, 5]]]})"),
            "rules file 'r.json': rules[0] layout entry 1: must be null, an axis name or a list "
            "of axis names, got a number 5");
  EXPECT_EQ(error_of(R"({"rules": [["a", "model"]]})"),
            "rules file 'r.json': rules[0]: the layout must be a list with one entry per tensor "
            "dimension (null, an axis name or a list of axis names), got a string \"model\"");
  EXPECT_EQ(error_of(R"({"rules": [["a", [[]]]]})"),
            "rules file 'r.json': rules[0] layout entry 0: an empty list of axes; write null for "
            "a dimension that is not split");
  EXPECT_EQ(error_of(R"({"rules": [["a", [["x", 1]]]]})"),
            "rules file 'r.json': rules[0] layout entry 0: a list of axes must hold axis names, "
            "got a number 1 at position 1");
}

TEST_F(RulesFileTest, RuleRefusedByTheMapNamesItsPosition) {
  EXPECT_EQ(error_of(R"({"rules": [["a", [null]], ["a", ["x"]]]})"),
            "rules[1] ('a'): 'a' already exists in the LayoutMap with value layout[None]. Please "
            "make sure to not use duplicated keys.");
  EXPECT_THAT(error_of(R"({"rules": [["a(", [null]]]})"),
              HasSubstr("rules[0] ('a('): LayoutMap key 'a(' is refused: regex 'a(' does not "
                        "compile"));
  EXPECT_THAT(
      error_of(R"({"mesh": {"shape": [2], "axis_names": ["data"]}, "rules": [["a", ["model"]]]})"),
      HasSubstr("rules[0] ('a'): LayoutMap key 'a': Invalid axis names for Layout."));
}

TEST_F(RulesFileTest, BadTopLevelMeshAndMode) {
  EXPECT_EQ(error_of("[1]"),
            "rules file 'r.json': top level: must be an object with a \"rules\" list, got a list");
  EXPECT_EQ(error_of("{}"), "rules file 'r.json': top level: has no \"rules\" list");
  EXPECT_EQ(error_of(R"({"rules": [], "rulez": []})"),
            "rules file 'r.json': top level: unknown key 'rulez'; expected \"rules\" and "
            "optionally \"mesh\" and \"mode\"");
  EXPECT_THAT(error_of(R"({"mode": "re", "rules": []})"),
              HasSubstr("rules file 'r.json': \"mode\": unknown match mode 're'"));
  EXPECT_EQ(error_of(R"({"mesh": {"shape": [2, 4]}, "rules": []})"),
            "rules file 'r.json': \"mesh\": needs both \"shape\" and \"axis_names\"");
  EXPECT_EQ(error_of(R"({"mesh": {"shape": [2, "4"], "axis_names": ["a", "b"]}, "rules": []})"),
            "rules file 'r.json': \"mesh\".\"shape\"[1]: must be an integer of at most 64 bits, "
            "got a string \"4\"");
  EXPECT_THAT(error_of(R"({"mesh": {"shape": [2, 4], "axis_names": ["a"]}, "rules": []})"),
              HasSubstr("\"mesh\": Shape and axis_names should have same size."));
  EXPECT_THAT(error_of(R"({"mesh": {"shape": [0], "axis_names": ["a"]}, "rules": []})"),
              HasSubstr("DeviceMesh axis 'a' has size 0"));
}

TEST_F(RulesFileTest, NumbersOutOfRangeAreErrorsNotCrashes) {
  // Found by the rules_file fuzz target: nlohmann throws out_of_range, not parse_error.
  EXPECT_THAT(error_of("1e400"), HasSubstr("rules file 'r.json': not valid JSON: "));
  EXPECT_THAT(error_of(R"({"rules": [], "mode": 1e400})"), HasSubstr("not valid JSON"));
  EXPECT_EQ(
      error_of(R"({"mesh": {"shape": [18446744073709551615], "axis_names": ["a"]}, "rules": []})"),
      "rules file 'r.json': \"mesh\".\"shape\"[0]: must be an integer of at most 64 bits, got "
      "a number 18446744073709551615");
}

TEST_F(RulesFileTest, HugeMeshIsRefusedBeforeNamingItsDevices) {
  EXPECT_EQ(error_of(R"({"mesh": {"shape": [1048576], "axis_names": ["a"]}, "rules": []})"),
            "rules file 'r.json': \"mesh\": shape [1048576] describes 1048576 devices, but "
            "list_devices() has 8; set MESHLAYOUT_CPU_DEVICES or set_device_count(), or list "
            "\"devices\"");
}

TEST_F(RulesFileTest, MissingFileIsNotFound) {
  EXPECT_THROW(load_rules_file("/nonexistent/rules.json"), NotFoundError);
}

// Fault 4: 100,000 nested '[' in a rule, layout, pattern or mesh.shape overflowed the stack
// (the recursive dump() that quoted the bad value).
TEST_F(RulesFileTest, DeepNestingIsRefusedWithTheLimit) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& text :
       {R"({"rules": [)" + deep + "]}", R"({"rules": [["a", )" + deep + "]]}",
        R"({"rules": [[)" + deep + R"(, [null]]]})",
        R"({"mesh": {"shape": )" + deep + R"(, "axis_names": ["a"]}, "rules": []})"}) {
    const std::string error = error_of(text);
    EXPECT_THAT(error, HasSubstr("rules file 'r.json': lists and objects are nested deeper "
                                 "than the limit of 64 levels, at line 1, column "));
    EXPECT_LT(error.size(), 200u);
  }
  // Within the limit, the bad value is still quoted (shortly).
  EXPECT_EQ(error_of(R"({"rules": [["a", [)" + std::string(50, '[') + std::string(52, ']') + "]}"),
            "rules file 'r.json': rules[0] layout entry 0: a list of axes must hold axis names, "
            "got a list " +
                std::string(49, '[') + std::string(8, ']') + "... at position 0");
}

TEST_F(RulesFileTest, DuplicateKeysAreRefusedAtAnyLevel) {
  EXPECT_EQ(error_of(R"({"rules": [], "rules": [["a", [null]]]})"),
            "rules file 'r.json': the key 'rules' appears twice in the top-level object; each "
            "key may appear once");
  EXPECT_EQ(error_of(R"({"mesh": {"shape": [2], "axis_names": ["a"], "shape": [4]}, "rules": []})"),
            "rules file 'r.json': the key 'shape' appears twice in the object \"mesh\"; each key "
            "may appear once");
}

// Fault 5 and the wrong reasons: /dev/zero was read until bad_alloc; a directory was "not
// valid JSON".
TEST_F(RulesFileTest, OnlyRegularFilesOfBoundedSizeAreRead) {
  auto load_error = [](const std::string& path) -> std::string {
    try {
      load_rules_file(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_EQ(load_error("/dev/zero"),
            "rules file '/dev/zero' is a character device, not a regular file");
  EXPECT_EQ(load_error("/"), "rules file '/' is a directory, not a regular file");
  EXPECT_EQ(load_error("/nonexistent/rules.json"),
            "rules file '/nonexistent/rules.json' does not exist");
}

// A 50 MB pattern gave a 150 MB message: quoted values are cut.
TEST_F(RulesFileTest, HugeBadPatternGivesAShortMessage) {
  const std::string error =
      error_of(R"({"rules": [[")" + std::string(1 << 20, 'a') + R"((", [null]]]})");
  EXPECT_THAT(error, HasSubstr("rules[0] ('aaaa"));
  EXPECT_THAT(error, HasSubstr("…' (1048577 bytes)"));
  EXPECT_LT(error.size(), 1500u);
}

}  // namespace
}  // namespace meshlayout
