#include "meshlayout/layout_map/layout_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class LayoutMapTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
};

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(LayoutMapTest, Seed003ExamplesWithTupleShortcutAndMeshPopulation) {
  LayoutMap layout_map(mesh_);
  layout_map["dense.*kernel"] = {None, "model"};
  layout_map["dense.*bias"] = {"model"};
  layout_map["conv2d.*kernel"] = TensorLayout({None, None, None, "model"});
  layout_map["conv2d.*bias"] = TensorLayout({"model"});
  const TensorLayout layout_2d({None, "model"}, mesh_);
  const TensorLayout layout_1d({"model"}, mesh_);
  const TensorLayout layout_4d({None, None, None, "model"}, mesh_);
  EXPECT_EQ(layout_map["dense_1.kernel"].get(), layout_2d);
  EXPECT_EQ(layout_map["dense_1.bias"].get(), layout_1d);
  EXPECT_EQ(layout_map["dense_2.kernel"].get(), layout_2d);
  EXPECT_EQ(layout_map["dense_2.bias"].get(), layout_1d);
  EXPECT_EQ(layout_map["my_model/conv2d_123/kernel"].get(), layout_4d);
  EXPECT_EQ(layout_map["my_model/conv2d_123/bias"].get(), layout_1d);
  EXPECT_EQ(layout_map["my_model/conv3d_1/kernel"].get(), std::nullopt);
  EXPECT_EQ(layout_map["my_model/conv3d_1/bias"].get(), std::nullopt);
}

TEST_F(LayoutMapTest, SearchModeReportsEveryMatchingPatternInInsertionOrder) {
  LayoutMap map(mesh_);
  map["dense.*kernel"] = {None, "model"};
  map[".*bias"] = {"model"};
  map[".*kernel"] = {"model", None};
  EXPECT_EQ(error_of([&] { map.get("dense_1/kernel"); }),
            "Path 'dense_1/kernel' matches multiple layout specification keys: "
            "['dense.*kernel', '.*kernel']. Please make sure each tensor/variable path only "
            "matches at most one layout specification key in the LayoutMap.");
  EXPECT_EQ(map.match_index("conv/kernel"), 2u);
}

TEST_F(LayoutMapTest, ExactKeyWinsWithoutAmbiguityError) {
  LayoutMap map(mesh_);
  map[".*kernel"] = {None, "model"};
  map["d1.kernel"] = {"model", None};
  EXPECT_EQ(map.match_index("d1.kernel"), 1u);
}

TEST_F(LayoutMapTest, ModesDifferAsKerasVersionsDo) {
  LayoutMap search(mesh_, MatchMode::kSearch), full(mesh_, MatchMode::kFullmatch),
      first(mesh_, MatchMode::kFirst);
  for (LayoutMap* m : {&search, &full, &first}) {
    m->set("conv2d.*kernel", {None, None, None, "model"});
  }
  // Keras 3.14 made this rule stop matching scoped paths (keras #22164).
  EXPECT_EQ(search.match_index("my_model/conv2d_123/kernel"), 0u);
  EXPECT_EQ(full.match_index("my_model/conv2d_123/kernel"), std::nullopt);
  EXPECT_EQ(first.match_index("my_model/conv2d_123/kernel"), std::nullopt);
  EXPECT_EQ(full.match_index("conv2d_123/kernel"), 0u);
  EXPECT_EQ(first.match_index("conv2d_123/kernel_extra"), 0u);
  EXPECT_EQ(full.match_index("conv2d_123/kernel_extra"), std::nullopt);
}

TEST_F(LayoutMapTest, FirstModeTakesTheFirstHitInInsertionOrder) {
  LayoutMap map(mesh_, MatchMode::kFirst);
  map[".*dense.*kernel"] = {None, "model"};
  map[".*kernel"] = {"model", None};
  EXPECT_EQ(map.match_index("dense_1.kernel"), 0u);
  EXPECT_EQ(map.match_index("conv.kernel"), 1u);
}

TEST_F(LayoutMapTest, RefusesDuplicateKeyAndKeepsTheFirst) {
  LayoutMap map(mesh_);
  map["d1.kernel"] = {None, "model"};
  EXPECT_EQ(error_of([&] {
              map["d1.kernel"] = {"model", None};
            }),
            "'d1.kernel' already exists in the LayoutMap with value "
            "layout[None,model]@mesh[data=2,model=4]. Please make sure to not use duplicated "
            "keys.");
  EXPECT_EQ(map.size(), 1u);
  EXPECT_EQ(map.rule(0).layout.axes()[1], DimSharding("model"));
}

TEST_F(LayoutMapTest, RefusesRegexThatDoesNotCompileAtInsertion) {
  LayoutMap map(mesh_);
  EXPECT_EQ(error_of([&] {
              map["dense[0-9/kernel"] = {None, "model"};
            }),
            "LayoutMap key 'dense[0-9/kernel' is refused: regex 'dense[0-9/kernel' does not "
            "compile: unterminated character set starting at position 5");
  EXPECT_TRUE(map.empty());
}

TEST_F(LayoutMapTest, RefusesPythonOnlySyntaxAtInsertion) {
  LayoutMap map(mesh_);
  EXPECT_THAT(error_of([&] {
                map["(dense)_\\1"] = {None, "model"};
              }),
              HasSubstr("LayoutMap key '(dense)_\\\\1' is refused: regex '(dense)_\\\\1' uses a "
                        "back-reference"));
  EXPECT_THAT(error_of([&] {
                map["dense(?!_0)"] = {None, "model"};
              }),
              HasSubstr("uses a look-ahead"));
  EXPECT_TRUE(map.empty());
}

TEST_F(LayoutMapTest, RefusesUnknownAxisAndLeavesTheMapUnchanged) {
  LayoutMap map(mesh_);
  EXPECT_EQ(error_of([&] {
              map["dense.*kernel"] = {None, "modle"};
            }),
            "LayoutMap key 'dense.*kernel': Invalid axis names for Layout. layout[None,modle] "
            "uses axis ['modle'], which mesh[data=2,model=4] does not have; valid axis names: "
            "['data', 'model']");
  EXPECT_TRUE(map.empty());
  EXPECT_FALSE(map.contains("dense.*kernel"));
}

TEST_F(LayoutMapTest, RefusesOneAxisTwiceInALayout) {
  LayoutMap map(mesh_);
  EXPECT_EQ(error_of([&] {
              map["emb"] = {"model", "model"};
            }),
            "TensorLayout layout[model,model] uses mesh axis 'model' twice (dimensions 0 and "
            "1); a mesh axis may split at most one dimension, once");
}

TEST_F(LayoutMapTest, KeepsALayoutsOwnMeshAndGivesMeshlessOnesTheMapsMesh) {
  DeviceMesh other = DeviceMesh::from_string("mesh[model=8]");
  LayoutMap map(mesh_);
  map["a"] = TensorLayout({"model"}, other);
  map["b"] = {"model"};
  EXPECT_EQ(map.rule(0).layout.device_mesh(), other);
  EXPECT_EQ(map.rule(1).layout.device_mesh(), mesh_);
  LayoutMap no_mesh;
  no_mesh["a"] = {"anything"};
  EXPECT_EQ(no_mesh.rule(0).layout.device_mesh(), std::nullopt);
  EXPECT_EQ(no_mesh.get_default_mesh(), std::nullopt);
}

TEST_F(LayoutMapTest, MappingOperations) {
  LayoutMap map(mesh_);
  map["a"] = {"model"};
  map["b"] = {"data"};
  map["c"] = {None};
  EXPECT_EQ(map.size(), 3u);
  EXPECT_THAT(map.keys(), ElementsAre("a", "b", "c"));
  std::vector<std::string> iterated;
  for (const LayoutRule& r : map) iterated.push_back(r.pattern);
  EXPECT_THAT(iterated, ElementsAre("a", "b", "c"));
  EXPECT_TRUE(map.contains("b"));
  EXPECT_FALSE(map.contains("b.*"));
  EXPECT_EQ(map.erase("b"), TensorLayout({"data"}, mesh_));
  EXPECT_THAT(map.keys(), ElementsAre("a", "c"));
  EXPECT_EQ(map.match_index("c"), 1u);  // indices follow the erase
  EXPECT_EQ(error_of([&] { map.erase("zz"); }),
            "LayoutMap has no key 'zz'; its keys are ['a', 'c']");
  // Keras: pop of a key that is not stored raises KeyError even with a default.
  EXPECT_EQ(error_of([&] { map.pop("zz", TensorLayout({"data"}, mesh_)); }),
            "LayoutMap has no key 'zz'; its keys are ['a', 'c']");
  EXPECT_THROW(map.pop("c.*"), NotFoundError);  // a regex hit is not a stored key either
  EXPECT_EQ(map.size(), 2u);
  // Keras: get(key, default) never returns the default (lookups never raise KeyError).
  EXPECT_EQ(map.get("zz", TensorLayout({"data"}, mesh_)), std::nullopt);
  EXPECT_EQ(map.get("a", TensorLayout({"data"}, mesh_)), TensorLayout({"model"}, mesh_));
  EXPECT_EQ(map.pop("a", std::nullopt), TensorLayout({"model"}, mesh_));
  EXPECT_EQ(map.popitem().pattern, "c");
  EXPECT_TRUE(map.empty());
  EXPECT_THROW(map.popitem(), NotFoundError);
  map.update({{"x", TensorLayout({"model"})}, {"y", TensorLayout({"data"})}});
  LayoutMap copy = map;
  EXPECT_EQ(copy, map);
  copy.clear();
  EXPECT_TRUE(copy.empty());
  EXPECT_EQ(map.size(), 2u);
  EXPECT_EQ(map.match_index("x"), 0u);
  LayoutMap other(mesh_);
  other["y"] = {"model"};
  EXPECT_THROW(other.update(map), ValueError);  // 'y' is a duplicate
  EXPECT_THAT(other.keys(), ElementsAre("y", "x"));
}

TEST_F(LayoutMapTest, LookupsSeeRulesAddedAfterAnEarlierLookup) {
  LayoutMap map(mesh_);
  map["dense"] = {None, "model"};
  EXPECT_EQ(map.match_index("conv/kernel"), std::nullopt);
  map["conv"] = {"model", None};
  EXPECT_EQ(map.match_index("conv/kernel"), 1u);
  LayoutMap moved = std::move(map);
  EXPECT_EQ(moved.match_index("conv/kernel"), 1u);
}

TEST_F(LayoutMapTest, ExplainListsEveryRuleAndTheVerdict) {
  LayoutMap map(mesh_);
  map["dense.*kernel"] = {None, "model"};
  map[".*kernel"] = {"model", None};
  MatchExplanation e = map.explain("dense_1/kernel");
  EXPECT_EQ(e.verdict, MatchExplanation::Verdict::kAmbiguous);
  EXPECT_THAT(e.regex_hits, ElementsAre(0u, 1u));
  EXPECT_EQ(
      e.to_string(map),
      "path 'dense_1/kernel' (mode search, 2 rules)\n"
      "  rule   0  'dense.*kernel'  matches as a regex -> "
      "layout[None,model]@mesh[data=2,model=4]\n"
      "  rule   1  '.*kernel'  matches as a regex -> layout[model,None]@mesh[data=2,model=4]\n"
      "  verdict: ambiguous: 2 rules match; in mode search a path may match one rule only\n");
  EXPECT_EQ(map.explain("bias").verdict, MatchExplanation::Verdict::kNoMatch);
  MatchExplanation exact = map.explain(".*kernel");
  EXPECT_EQ(exact.verdict, MatchExplanation::Verdict::kExact);
  EXPECT_EQ(exact.chosen_rule, 1u);
}

TEST_F(LayoutMapTest, UnusedRulesFindsRulesThatMatchNoPath) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map[".*/dense/kernel"] = {None, "model"};
  map["conv2d.*kernel"] = {None, None, None, "model"};  // stopped matching in Keras 3.14
  map["d1/bias"] = {"model"};
  std::vector<std::string> paths{"my_model/dense/kernel", "my_model/conv2d_1/kernel", "d1/bias"};
  EXPECT_THAT(map.unused_rules(paths), ElementsAre(1u));
}

TEST_F(LayoutMapTest, PathsWithANewlineKeepPythonSemanticsInEveryMode) {
  // '.' does not match '\n' in Python: re.fullmatch('.*kernel', 'a\nkernel') is None.
  for (MatchMode mode : {MatchMode::kFullmatch, MatchMode::kFirst}) {
    LayoutMap map(mesh_, mode);
    map[".*kernel"] = {None, "model"};
    EXPECT_EQ(map.match_index("a\nkernel"), std::nullopt) << match_mode_name(mode);
    EXPECT_EQ(map.match_index("a/kernel"), 0u) << match_mode_name(mode);
  }
  LayoutMap search(mesh_, MatchMode::kSearch);
  search[".*kernel"] = {None, "model"};
  EXPECT_EQ(search.match_index("a\nkernel"), 0u);  // re.search finds 'kernel' after the '\n'
}

TEST_F(LayoutMapTest, ManyRulesStillOnePassAndCorrect) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  for (int i = 0; i < 2000; ++i) {
    map.set("layers_" + std::to_string(i) + "/mlp/kernel", {None, "model"});
  }
  EXPECT_EQ(map.match_index("layers_1234/mlp/kernel"), 1234u);
  EXPECT_EQ(map.match_index("model/layers_1234/mlp/kernel"), std::nullopt);
}

TEST_F(LayoutMapTest, ConcurrentLookupsAgree) {
  LayoutMap map(mesh_);
  for (int i = 0; i < 50; ++i) map.set("block_" + std::to_string(i) + "/", {None, "model"});
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        int b = (i * 7 + t) % 50;
        auto hit = map.match_index("m/block_" + std::to_string(b) + "/kernel");
        if (hit != static_cast<size_t>(b)) ++wrong[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(wrong, ElementsAre(0, 0, 0, 0));
}

TEST(MatchModeTest, NamesRoundTripAndUnknownIsRefused) {
  for (MatchMode m : {MatchMode::kSearch, MatchMode::kFullmatch, MatchMode::kFirst}) {
    EXPECT_EQ(parse_match_mode(match_mode_name(m)), m);
  }
  EXPECT_EQ(error_of([] { parse_match_mode("regex"); }),
            "unknown match mode 'regex'; expected 'search' (Keras 3.0–3.13), 'fullmatch' "
            "(Keras ≥ 3.14) or 'first' (Keras 2)");
}

}  // namespace
}  // namespace meshlayout
