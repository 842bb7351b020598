#include "meshlayout/plan/layout_svg.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A mesh on the first devices (the process's device count is lifted to kMaxMeshDevices, as the
// commands do, so a mesh must name its devices).
DeviceMesh make_mesh(std::vector<int64_t> shape, std::vector<std::string> names) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<std::string> devices;
  for (int64_t i = 0; i < n; ++i) devices.push_back("cpu:" + std::to_string(i));
  return DeviceMesh(std::move(shape), std::move(names), std::move(devices));
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class LayoutSvgTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(kMaxMeshDevices); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(LayoutSvgTest, MeshGridsAreNearSquareRowsByColumns) {
  const auto grid = [](std::vector<int64_t> shape, std::vector<std::string> names) {
    return pick_mesh_grid(make_mesh(std::move(shape), std::move(names)));
  };
  MeshGrid g = grid({2, 4}, {"data", "model"});
  EXPECT_EQ(g.split, 1);
  EXPECT_EQ(g.rows, 2);
  EXPECT_EQ(g.cols, 4);
  EXPECT_EQ(g.rows_label, "data=2");
  EXPECT_EQ(g.cols_label, "model=4");
  g = grid({2, 2, 2}, {"a", "b", "c"});
  EXPECT_EQ(g.rows, 2);
  EXPECT_EQ(g.cols, 4);
  EXPECT_EQ(g.cols_label, "b=2 x c=2");
  g = grid({4, 4, 2, 2}, {"a", "b", "c", "d"});
  EXPECT_EQ(g.split, 1);  // 4 x 16: as square as 16 x 4, and wider
  EXPECT_EQ(g.rows * g.cols, 64);
  g = grid({8}, {"model"});
  EXPECT_EQ(g.rows, 1);
  EXPECT_EQ(g.cols, 8);
  g = grid({128, 128}, {"data", "model"});
  EXPECT_EQ(g.rows, 128);
  EXPECT_EQ(g.cols, 128);
  g = grid({100}, {"x"});
  EXPECT_EQ(g.cols, 10);
  EXPECT_EQ(g.rows, 10);
  EXPECT_EQ(g.rows_label, "wrapped, 10 devices a row");
}

TEST_F(LayoutSvgTest, TensorDimsPreferTheMostSplitThenTheLargest) {
  DeviceMesh mesh = make_mesh({2, 4}, {"data", "model"});
  TensorDims d =
      pick_tensor_dims(ShardGeometry(TensorLayout({None, "model", None}, mesh), {64, 8, 128}));
  EXPECT_EQ(d.row_dim, 1);
  EXPECT_EQ(d.col_dim, 2);  // 128 > 64
  EXPECT_THAT(d.note, HasSubstr("dim 0 (size 64) is not split"));
  d = pick_tensor_dims(ShardGeometry(TensorLayout({"data", None, "model"}, mesh), {8, 64, 16}));
  EXPECT_EQ(d.row_dim, 0);
  EXPECT_EQ(d.col_dim, 2);
  d = pick_tensor_dims(
      ShardGeometry(TensorLayout({"data", "model", None, None}, mesh), {2, 4, 6, 8}));
  EXPECT_EQ(d.row_dim, 0);
  EXPECT_EQ(d.col_dim, 1);
  EXPECT_THAT(d.note,
              HasSubstr("4-D tensor (2, 4, 6, 8) drawn as the 2-D slice of dims 0 (down) and 1"));
  d = pick_tensor_dims(ShardGeometry(TensorLayout({"model"}, mesh), {8}));
  EXPECT_EQ(d.row_dim, -1);
  EXPECT_EQ(d.col_dim, 0);
  EXPECT_TRUE(d.note.empty());
}

TEST_F(LayoutSvgTest, SmallMeshHasAColourPerDeviceAndMarksCopies) {
  DeviceMesh mesh = make_mesh({2, 4}, {"data", "model"});
  const ShardGeometry g(TensorLayout({"data", None}, mesh), {8, 6});
  const LayoutDrawing d = draw_layout(g);
  EXPECT_TRUE(d.colour_per_device);
  for (int64_t p = 0; p < 8; ++p) {
    const std::string fill = "fill=\"" + css_colour(device_colour(p)) + "\"";
    EXPECT_EQ(count(d.mesh_svg, fill), 1u) << p;    // its cell
    EXPECT_EQ(count(d.tensor_svg, fill), 1u) << p;  // its stripe of the box it holds
  }
  // 2 boxes, 4 copies each: 6 devices hold a copy another device also holds.
  EXPECT_EQ(count(d.mesh_svg, "fill=\"url(#l-copy)\""), 6u);
  EXPECT_EQ(count(d.tensor_svg, "fill=\"url(#l-tcopy)\""), 6u);
  EXPECT_THAT(d.mesh_svg, HasSubstr("<title>cpu:5 (1, 1): box [4:8, 0:6], copy 2/4</title>"));
  EXPECT_THAT(d.mesh_svg, HasSubstr("copy 4/4"));
  EXPECT_THAT(d.tensor_svg, HasSubstr(">[0:4, 0:6]<"));
  EXPECT_THAT(d.tensor_svg, HasSubstr("cpu:0 +3"));
  EXPECT_THAT(d.tensor_svg, HasSubstr("dim 0: 8 down, 2 blocks over data"));
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_THAT(d.notes[0], HasSubstr("4 copies of every box"));
}

TEST_F(LayoutSvgTest, FullyShardedNoCopies) {
  DeviceMesh mesh = make_mesh({2, 4}, {"data", "model"});
  const LayoutDrawing d =
      draw_layout(ShardGeometry(TensorLayout({"data", "model"}, mesh), {6, 98}));
  EXPECT_THAT(d.mesh_svg, Not(HasSubstr("url(#l-copy)")));
  EXPECT_TRUE(d.notes.empty());
  EXPECT_THAT(d.tensor_svg, HasSubstr(">[3:6, 75:98]<"));  // uneven: the last block is 23 wide
  EXPECT_THAT(d.tensor_svg, HasSubstr(">cpu:7<"));
}

TEST_F(LayoutSvgTest, UnevenSplitWithEmptyBoxesSaysSo) {
  DeviceMesh mesh = make_mesh({8}, {"model"});
  const LayoutDrawing d = draw_layout(ShardGeometry(TensorLayout({"model"}, mesh), {5}));
  // 8 blocks of 1: blocks 5..7 are empty.
  EXPECT_THAT(d.notes, ::testing::Contains(HasSubstr("3 boxes of the slice are empty")));
}

TEST_F(LayoutSvgTest, LargeMeshIsAHeatmapColouredByBox) {
  DeviceMesh mesh = make_mesh({128, 128}, {"data", "model"});
  const ShardGeometry g(TensorLayout({None, "model"}, mesh), {16384, 53248});
  const LayoutDrawing d = draw_layout(g);
  EXPECT_FALSE(d.colour_per_device);
  EXPECT_THAT(d.mesh_svg, HasSubstr("href=\"data:image/png;base64,"));
  EXPECT_THAT(d.notes, ::testing::Contains(HasSubstr(
                           "16384 devices (more than 1024): the mesh is a 128 x 128 heatmap, "
                           "one pixel a device, coloured by the box each holds as the tensor's "
                           "boxes are: the hue follows dim 1's blocks (red first, violet last) "
                           "(copies of a box share its colour)")));
  // The tensor's 128 boxes in their box colours.
  EXPECT_THAT(d.tensor_svg, HasSubstr(css_colour(box_colour(0, 1, 0, 128))));
  EXPECT_THAT(d.tensor_svg, HasSubstr(css_colour(box_colour(0, 1, 127, 128))));
  EXPECT_LT(d.mesh_svg.size() + d.tensor_svg.size(), 200u * 1024);
  // Split both ways: 16,384 boxes are drawn as an image of their colours.
  const LayoutDrawing both =
      draw_layout(ShardGeometry(TensorLayout({"data", "model"}, mesh), {16384, 53248}));
  EXPECT_THAT(both.notes, ::testing::Contains(HasSubstr(
                              "128 x 128 boxes in the slice (more than 1024): drawn as an image "
                              "of 128 x 128 pixels, each the colour of the box holding its part")));
  EXPECT_THAT(both.tensor_svg, HasSubstr("href=\"data:image/png;base64,"));
}

TEST_F(LayoutSvgTest, LargeUnevenSplitShowsOnlyTheBoxesHoldingElements) {
  // 100 elements over 2,048 devices: boxes 100 to 2,047 are empty.
  DeviceMesh mesh = make_mesh({2048}, {"x"});
  const LayoutDrawing d = draw_layout(ShardGeometry(TensorLayout({"x"}, mesh), {100}));
  EXPECT_THAT(d.notes, ::testing::Contains(HasSubstr(
                           "1 x 2048 boxes in the slice (more than 1024): drawn as an image of "
                           "100 x 1 pixels")));
  EXPECT_THAT(d.notes,
              ::testing::Contains("light grey devices hold an empty box (an uneven split)"));
  EXPECT_THAT(d.mesh_svg, HasSubstr(">wrapped, 46 devices a row</text>"));
  EXPECT_THAT(d.mesh_svg, HasSubstr("mesh: x=2048 across"));
  // The colour ramp spans the 100 boxes that hold elements: the last one is violet (boxes
  // drawn one by one here to see their colours).
  const LayoutDrawing rects =
      draw_layout(ShardGeometry(TensorLayout({"x"}, mesh), {100}), {.max_tensor_blocks = 4096});
  EXPECT_THAT(rects.tensor_svg, HasSubstr(css_colour(box_colour(0, 1, 99, 100))));
  EXPECT_THAT(rects.tensor_svg, HasSubstr("<title>box [99:100]: 1 device</title>"));
  EXPECT_THAT(rects.tensor_svg, ::testing::Not(HasSubstr("box [100:100]")));
}

TEST_F(LayoutSvgTest, HugeMeshHeatmapIsTiled) {
  DeviceMesh mesh = make_mesh({512, 512}, {"data", "model"});
  const LayoutDrawing d = draw_layout(ShardGeometry(TensorLayout({"data", None}, mesh), {4096, 8}));
  EXPECT_THAT(d.notes,
              ::testing::Contains(HasSubstr("256 x 256 heatmap, one pixel per 2 x 2 devices")));
  EXPECT_LT(d.mesh_svg.size(), 300u * 1024);
}

TEST_F(LayoutSvgTest, StandaloneDocument) {
  DeviceMesh mesh = make_mesh({2, 2}, {"data", "model"});
  const std::string svg = render_layout_svg_document(
      ShardGeometry(TensorLayout({"data", None, "model"}, mesh), {4, 3, 8}));
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("tensor (4, 3, 8) as layout[data,None,model]@mesh[data=2,model=2]"));
  EXPECT_THAT(svg, HasSubstr("blocks 2 x 1 x 2; 1 copy of each box; largest box 24 elements"));
  EXPECT_THAT(svg, HasSubstr("dim 1 (size 3) is not split"));
  EXPECT_EQ(count(svg, "<svg"), 3u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

}  // namespace
}  // namespace meshlayout
