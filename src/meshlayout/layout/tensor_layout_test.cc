#include "meshlayout/layout/tensor_layout.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::ValueErrorMessage;

using Names = std::vector<std::string>;

class TensorLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }

  DeviceMesh mesh_{DeviceMesh({2, 4}, {"data", "model"})};
};

TEST(DimShardingTest, NoneOneAxisOrSeveral) {
  DimSharding none = None;
  EXPECT_FALSE(none.is_sharded());
  EXPECT_TRUE(none.axes().empty());
  EXPECT_EQ(none.to_string(), "None");
  EXPECT_EQ(none, DimSharding());

  DimSharding one = "model";
  EXPECT_TRUE(one.is_sharded());
  EXPECT_EQ(one.axes(), (Names{"model"}));
  EXPECT_EQ(one.to_string(), "model");
  EXPECT_EQ(one, DimSharding(std::string("model")));

  DimSharding two{"data", "model"};
  EXPECT_TRUE(two.is_sharded());
  EXPECT_EQ(two.axes(), (Names{"data", "model"}));
  EXPECT_EQ(two.to_string(), "(data,model)");
  EXPECT_EQ(two, DimSharding(Names{"data", "model"}));

  EXPECT_NE(two, (DimSharding{"model", "data"}));  // order matters: major first
  EXPECT_NE(one, none);
  std::ostringstream os;
  os << two;
  EXPECT_EQ(os.str(), "(data,model)");
}

TEST_F(TensorLayoutTest, BraceSyntaxWithNoneAndAnAxis) {
  TensorLayout layout({None, "model"});
  ASSERT_EQ(layout.rank(), 2);
  EXPECT_FALSE(layout.axes()[0].is_sharded());
  EXPECT_EQ(layout.axes()[1].axes(), (Names{"model"}));
  EXPECT_FALSE(layout.device_mesh().has_value());
  EXPECT_EQ(layout.to_string(), "layout[None,model]");
}

// Whether `T(args…)` compiles for the brace forms the header documents. Checked through a
// template so that an ambiguous call yields false instead of breaking the build.
template <typename T>
constexpr bool kNestedBraceSyntaxCompiles = requires {
  T({{"data", "model"}, None});
};
template <typename T>
constexpr bool kFlatBraceSyntaxCompiles = requires {
  T({None, "model"});
};

TEST_F(TensorLayoutTest, NestedBraceSyntaxFromTheHeaderCompiles) {
  EXPECT_TRUE(kFlatBraceSyntaxCompiles<TensorLayout>);
  // tensor_layout.h documents `TensorLayout both({{"data", "model"}, None});`. Without the
  // initializer_list constructor it is ambiguous with the copy constructor: {"data", "model"}
  // also converts to std::vector<DimSharding> (two dimensions) and None to
  // std::optional<DeviceMesh>.
  EXPECT_TRUE(kNestedBraceSyntaxCompiles<TensorLayout>)
      << "TensorLayout({{\"data\", \"model\"}, None}) does not compile (ambiguous overload)";
}

TEST_F(TensorLayoutTest, BraceSyntaxWithSeveralAxesOnOneDimension) {
  TensorLayout layout({{"data", "model"}, None});
  ASSERT_EQ(layout.rank(), 2);
  EXPECT_EQ(layout.axes()[0].axes(), (Names{"data", "model"}));
  EXPECT_FALSE(layout.axes()[1].is_sharded());
  EXPECT_EQ(layout.to_string(), "layout[(data,model),None]");
  EXPECT_EQ(layout, TensorLayout(std::vector<DimSharding>{DimSharding{"data", "model"}, None}));
  // The same brace form with a mesh, and a single multi-axis dimension.
  TensorLayout with_mesh({{"data", "model"}, None}, mesh_);
  EXPECT_EQ(with_mesh.to_string(), "layout[(data,model),None]@mesh[data=2,model=4]");
  TensorLayout single({{"data", "model"}});
  ASSERT_EQ(single.rank(), 1);
  EXPECT_EQ(single.axes()[0].axes(), (Names{"data", "model"}));
}

TEST_F(TensorLayoutTest, MeshGivenAtConstruction) {
  TensorLayout layout({"data", None}, mesh_);
  ASSERT_TRUE(layout.device_mesh().has_value());
  EXPECT_TRUE(*layout.device_mesh() == mesh_);
  EXPECT_EQ(layout.to_string(), "layout[data,None]@mesh[data=2,model=4]");
  std::ostringstream os;
  os << layout;
  EXPECT_EQ(os.str(), "layout[data,None]@mesh[data=2,model=4]");
}

TEST_F(TensorLayoutTest, SetDeviceMeshAttachesTheMeshLater) {
  TensorLayout layout({None, "model"});
  layout.set_device_mesh(mesh_);
  ASSERT_TRUE(layout.device_mesh().has_value());
  EXPECT_TRUE(*layout.device_mesh() == mesh_);
  EXPECT_EQ(layout, TensorLayout({None, "model"}, mesh_));
}

TEST_F(TensorLayoutTest, WithDeviceMeshReturnsACopy) {
  const TensorLayout layout({None, "model"});
  TensorLayout attached = layout.with_device_mesh(mesh_);
  EXPECT_FALSE(layout.device_mesh().has_value());
  ASSERT_TRUE(attached.device_mesh().has_value());
  EXPECT_TRUE(*attached.device_mesh() == mesh_);
  EXPECT_NE(layout, attached);
  EXPECT_EQ(attached.axes(), layout.axes());
}

TEST_F(TensorLayoutTest, RejectsOverridingTheMesh) {
  TensorLayout layout({None, "model"}, mesh_);
  DeviceMesh other({4, 2}, {"data", "model"});
  EXPECT_EQ(ValueErrorMessage([&] { layout.set_device_mesh(other); }),
            "Cannot override device mesh value. Existing value is mesh[data=2,model=4]");
  // Even the same mesh may not be set twice, as in Keras.
  EXPECT_EQ(ValueErrorMessage([&] { layout.set_device_mesh(mesh_); }),
            "Cannot override device mesh value. Existing value is mesh[data=2,model=4]");
  EXPECT_EQ(ValueErrorMessage([&] { layout.with_device_mesh(other); }),
            "Cannot override device mesh value. Existing value is mesh[data=2,model=4]");
  EXPECT_TRUE(*layout.device_mesh() == mesh_);
}

TEST_F(TensorLayoutTest, RejectsUnknownAxisAtConstruction) {
  EXPECT_EQ(ValueErrorMessage([&] {
              TensorLayout({"data", "batch"}, mesh_);
            }),
            "Invalid axis names for Layout. layout[data,batch] uses axis ['batch'], which "
            "mesh[data=2,model=4] does not have; valid axis names: ['data', 'model']");
}

TEST_F(TensorLayoutTest, RejectsUnknownAxesWhenAttachingAndKeepsNoMesh) {
  TensorLayout layout({{"x", "model"}, "y"});
  EXPECT_EQ(ValueErrorMessage([&] { layout.set_device_mesh(mesh_); }),
            "Invalid axis names for Layout. layout[(x,model),y] uses axes ['x', 'y'], which "
            "mesh[data=2,model=4] does not have; valid axis names: ['data', 'model']");
  EXPECT_FALSE(layout.device_mesh().has_value());
}

TEST_F(TensorLayoutTest, RejectsAnAxisUsedInTwoDimensions) {
  EXPECT_EQ(ValueErrorMessage([] {
              TensorLayout({"data", None, "data"});
            }),
            "TensorLayout layout[data,None,data] uses mesh axis 'data' twice (dimensions 0 and "
            "2); a mesh axis may split at most one dimension, once");
}

TEST_F(TensorLayoutTest, RejectsAnAxisUsedTwiceInOneDimension) {
  EXPECT_EQ(ValueErrorMessage([] {
              TensorLayout(std::vector<DimSharding>{DimSharding{"model", "model"}});
            }),
            "TensorLayout layout[(model,model)] uses mesh axis 'model' twice (dimensions 0 and "
            "0); a mesh axis may split at most one dimension, once");
}

TEST_F(TensorLayoutTest, RejectsAnAxisInTwoDimensionsAcrossAGroup) {
  EXPECT_EQ(ValueErrorMessage([] {
              TensorLayout({"model", {"data", "model"}});
            }),
            "TensorLayout layout[model,(data,model)] uses mesh axis 'model' twice (dimensions 0 "
            "and 1); a mesh axis may split at most one dimension, once");
}

TEST_F(TensorLayoutTest, RejectsAnAxisNameThatIsNotAnIdentifier) {
  EXPECT_EQ(ValueErrorMessage([] {
              TensorLayout({None, "a-b"});
            }),
            "TensorLayout dimension 1 names axis 'a-b', which is not a valid mesh axis name "
            "(an identifier other than 'None')");
}

TEST_F(TensorLayoutTest, RejectsNoneSpelledAsAString) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout({std::string("None")}); }),
            "TensorLayout dimension 0 names axis 'None', which is not a valid mesh axis name "
            "(an identifier other than 'None')");
}

TEST_F(TensorLayoutTest, ReplicatedSplitsNothing) {
  TensorLayout layout = TensorLayout::replicated(3);
  EXPECT_EQ(layout.rank(), 3);
  EXPECT_TRUE(layout.used_axes().empty());
  EXPECT_EQ(layout.to_string(), "layout[None,None,None]");
  EXPECT_FALSE(layout.device_mesh().has_value());

  TensorLayout with_mesh = TensorLayout::replicated(2, mesh_);
  EXPECT_EQ(with_mesh.to_string(), "layout[None,None]@mesh[data=2,model=4]");
  EXPECT_EQ(TensorLayout::replicated(0).to_string(), "layout[]");
}

TEST_F(TensorLayoutTest, ReplicatedRejectsNegativeRank) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::replicated(-1); }),
            "layout rank must be >= 0, got -1");
}

TEST_F(TensorLayoutTest, UsedAxesInDimensionOrder) {
  TensorLayout layout({"model", None, {"data", "extra"}});
  EXPECT_EQ(layout.used_axes(), (Names{"model", "data", "extra"}));
  EXPECT_EQ(TensorLayout({None, {"b", "a"}}).used_axes(), (Names{"b", "a"}));
}

TEST_F(TensorLayoutTest, CheckShapeAcceptsMatchingRank) {
  TensorLayout layout({"data", None}, mesh_);
  EXPECT_NO_THROW(layout.check_shape({8, 6}));
  EXPECT_NO_THROW(layout.check_shape({7, 6}));  // uneven is fine unless strict
  EXPECT_NO_THROW(layout.check_shape({0, 0}));
  EXPECT_NO_THROW(TensorLayout({"data", None}).check_shape({3, 3}));  // no mesh needed
}

TEST_F(TensorLayoutTest, CheckShapeRankMismatchNamesTensorShapeAndLayout) {
  TensorLayout layout({"data", None}, mesh_);
  EXPECT_EQ(ValueErrorMessage([&] { layout.check_shape({8}, {}, "variable 'd1.kernel'"); }),
            "variable 'd1.kernel' with shape (8,) does not fit "
            "layout[data,None]@mesh[data=2,model=4]: the layout has 2 dimensions, the tensor "
            "has 1");
}

TEST_F(TensorLayoutTest, CheckShapeRankMismatchWithOneDimensionLayout) {
  EXPECT_EQ(ValueErrorMessage([] {
              TensorLayout({"data"}).check_shape({2, 3});
            }),
            "tensor with shape (2, 3) does not fit layout[data]: the layout has 1 dimension, "
            "the tensor has 2");
}

TEST_F(TensorLayoutTest, StrictCheckRejectsUnevenSplitOverOneAxis) {
  TensorLayout layout({"data", None}, mesh_);
  EXPECT_EQ(ValueErrorMessage([&] {
              layout.check_shape({7, 6}, {.strict = true}, "variable 'w'");
            }),
            "variable 'w' with shape (7, 6) does not fit layout[data,None]@mesh[data=2,model=4]: "
            "dimension 0 (size 7) is split over axis 'data' of total size 2, and 7 is not "
            "divisible by 2 (strict mode rejects uneven shards)");
  EXPECT_NO_THROW(layout.check_shape({8, 7}, {.strict = true}));
}

TEST_F(TensorLayoutTest, StrictCheckRejectsUnevenSplitOverSeveralAxes) {
  TensorLayout layout({None, {"data", "model"}}, mesh_);
  EXPECT_NO_THROW(layout.check_shape({3, 16}, {.strict = true}));
  EXPECT_EQ(ValueErrorMessage([&] {
              layout.check_shape({3, 10}, {.strict = true});
            }),
            "tensor with shape (3, 10) does not fit "
            "layout[None,(data,model)]@mesh[data=2,model=4]: dimension 1 (size 10) is split "
            "over axes ['data', 'model'] of total size 8, and 10 is not divisible by 8 (strict "
            "mode rejects uneven shards)");
}

TEST_F(TensorLayoutTest, StrictCheckNeedsAMesh) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout({"data"}).check_shape({8}, {.strict = true}); }),
            "tensor: layout[data] has no device mesh, so its split sizes are unknown");
}

TEST_F(TensorLayoutTest, EqualityComparesAxesAndMesh) {
  EXPECT_EQ(TensorLayout({"data", None}), TensorLayout({"data", None}));
  EXPECT_NE(TensorLayout({"data", None}), TensorLayout({None, "data"}));
  EXPECT_NE(TensorLayout({"data", None}), TensorLayout({"data"}));
  EXPECT_NE(TensorLayout({"data", None}), TensorLayout({"data", None}, mesh_));
  DeviceMesh smaller({2, 2}, {"data", "model"}, Names{"cpu:0", "cpu:1", "cpu:2", "cpu:3"});
  EXPECT_NE(TensorLayout({"data", None}, mesh_), TensorLayout({"data", None}, smaller));
}

TEST_F(TensorLayoutTest, TextFormRoundTrips) {
  DeviceMesh permuted({2}, {"a"}, Names{"cpu:1", "cpu:0"});
  std::vector<TensorLayout> layouts{
      TensorLayout({None, "model"}),
      TensorLayout({"data", None}, mesh_),
      TensorLayout({{"data", "model"}, None}, mesh_),
      TensorLayout({None, {"model", "data"}, None}),
      TensorLayout::replicated(0),
      TensorLayout::replicated(0, mesh_),
      TensorLayout({"a"}, permuted),
  };
  for (const TensorLayout& layout : layouts) {
    SCOPED_TRACE(layout.to_string());
    TensorLayout parsed = TensorLayout::from_string(layout.to_string());
    EXPECT_EQ(parsed, layout);
    EXPECT_EQ(parsed.to_string(), layout.to_string());
  }
}

TEST_F(TensorLayoutTest, FromStringReadsLayoutWithMesh) {
  TensorLayout layout = TensorLayout::from_string("layout[(data,model),None]@mesh[data=2,model=4]");
  ASSERT_EQ(layout.rank(), 2);
  EXPECT_EQ(layout.axes()[0].axes(), (Names{"data", "model"}));
  EXPECT_FALSE(layout.axes()[1].is_sharded());
  ASSERT_TRUE(layout.device_mesh().has_value());
  EXPECT_TRUE(*layout.device_mesh() == mesh_);
  EXPECT_EQ(layout.to_string(), "layout[(data,model),None]@mesh[data=2,model=4]");
}

TEST_F(TensorLayoutTest, FromStringReadsFormsWithoutBrackets) {
  EXPECT_EQ(TensorLayout::from_string("data,None"), TensorLayout({"data", None}));
  EXPECT_EQ(TensorLayout::from_string(" ( data , model ) , None "),
            TensorLayout({{"data", "model"}, None}));
  EXPECT_EQ(TensorLayout::from_string(" layout[ None , model ] "), TensorLayout({None, "model"}));
  EXPECT_EQ(TensorLayout::from_string("model"), TensorLayout({"model"}));
  EXPECT_EQ(TensorLayout::from_string("data,None@data=2,model=4"),
            TensorLayout({"data", None}, mesh_));
  EXPECT_EQ(TensorLayout::from_string("").rank(), 0);
  EXPECT_EQ(TensorLayout::from_string("layout[]").rank(), 0);
}

TEST_F(TensorLayoutTest, FromStringRejectsMissingClosingBracket) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("layout[data,None"); }),
            "layout text 'layout[data,None' has no closing ']'; expected the form "
            "layout[data,None]");
}

TEST_F(TensorLayoutTest, FromStringRejectsAnEmptyDimension) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("data,,None"); }),
            "layout text 'data,,None': dimension 1 is empty; expected entries like None, data "
            "or (data,model) separated by commas");
}

TEST_F(TensorLayoutTest, FromStringRejectsATrailingComma) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("layout[data,None,]"); }),
            "layout text 'layout[data,None,]': dimension 2 is empty; expected entries like "
            "None, data or (data,model) separated by commas");
}

TEST_F(TensorLayoutTest, FromStringRejectsAnUnclosedParenthesis) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("(data,model"); }),
            "layout text '(data,model': a '(' is not closed; expected entries like None, data "
            "or (data,model) separated by commas");
}

TEST_F(TensorLayoutTest, FromStringRejectsAMisplacedParenthesis) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("None,data)"); }),
            "layout text 'None,data)': dimension 1 ('data)') has a misplaced parenthesis; "
            "expected entries like None, data or (data,model) separated by commas");
}

// "(data,)" said "names axis ''": as in Python, it is the 1-tuple ("data",).
TEST_F(TensorLayoutTest, FromStringReadsATrailingCommaAsAPythonTuple) {
  const TensorLayout one = TensorLayout::from_string("(data,), None");
  ASSERT_EQ(one.axes().size(), 2u);
  EXPECT_EQ(one.axes()[0].axes(), std::vector<std::string>{"data"});
  EXPECT_EQ(one.to_string(), TensorLayout::from_string("(data),None").to_string());
  EXPECT_EQ(TensorLayout::from_string("(data, model ,)").axes()[0].axes(),
            (std::vector<std::string>{"data", "model"}));
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("(data,,model)"); }),
            "layout text '(data,,model)': dimension 0 ('(data,,model)') has an empty axis name "
            "at position 1; expected entries like None, data or (data,model) separated by commas");
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("None,()"); }),
            "layout text 'None,()': dimension 1 ('()') has no axis names in its parentheses; "
            "expected entries like None, data or (data,model) separated by commas");
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("(,)"); }),
            "layout text '(,)': dimension 0 ('(,)') has no axis names in its parentheses; "
            "expected entries like None, data or (data,model) separated by commas");
}

TEST_F(TensorLayoutTest, FromStringRejectsTextAfterAGroup) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("(data)model"); }),
            "layout text '(data)model': unexpected 'm' at position 6; expected entries like "
            "None, data or (data,model) separated by commas");
}

TEST_F(TensorLayoutTest, FromStringRejectsAnInvalidAxisName) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("data model"); }),
            "TensorLayout dimension 0 names axis 'data model', which is not a valid mesh axis "
            "name (an identifier other than 'None')");
}

TEST_F(TensorLayoutTest, FromStringRejectsAnAxisTheMeshLacks) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("layout[data]@mesh[model=2]"); }),
            "Invalid axis names for Layout. layout[data] uses axis ['data'], which "
            "mesh[model=2] does not have; valid axis names: ['model']");
}

TEST_F(TensorLayoutTest, FromStringRejectsAMalformedMesh) {
  EXPECT_EQ(ValueErrorMessage([] { TensorLayout::from_string("layout[data]@mesh[data=2"); }),
            "mesh text 'mesh[data=2' has no closing ']'; expected the form "
            "mesh[data=2,model=4]");
}

}  // namespace
}  // namespace meshlayout
