// layout_svg.h — SVG pictures of one layout (`meshlayout layout --svg`, and every tensor of
// `plan --html`, plan_html.h): the tensor cut into the boxes the devices hold, and the mesh as
// a grid of devices showing which box each holds. layout/layout_grid.h draws the same as text
// for the terminal.
//
// Colours (svg_basics.h): up to `max_device_cells` devices (default 1,024) every device has
// its own colour (device_colour), used for its cell of the mesh and for its stripe of each box
// it holds in the tensor; devices holding a copy of a box that an earlier device holds (replica_of
// > 0) are hatched and say "copy k/n". Larger meshes are drawn as a heatmap image (one pixel a
// device, or a tile of devices above `max_heatmap_side` pixels a side) coloured by the box each
// holds (box_colour: hue and lightness along the slice's two dimensions), the tensor's boxes in
// the same colours; the drawing says so.
// N-D tensors are drawn as a 2-D slice: the two dimensions split into the most blocks (then
// the largest; pick_tensor_dims), the others at their first block; the drawing says which.
// N-D meshes are drawn as rows x columns: the leading axes down, the others across
// (pick_mesh_grid), with heavier lines between the outer axes' groups.
//
// Example:
//   ShardGeometry g(TensorLayout({"data", None}, mesh), {8, 6});
//   LayoutDrawing d = draw_layout(g);                 // two <svg> elements and their notes
//   std::string file = render_layout_svg_document(g); // one standalone .svg file
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/plan/svg_basics.h"

namespace meshlayout {

struct LayoutDrawOptions {
  int64_t max_device_cells = 1024;   // more devices: the mesh as a heatmap, colours per box
  int64_t max_labelled_cells = 64;   // up to this many devices: text in each cell
  int64_t max_tensor_blocks = 1024;  // more boxes in the slice: an image of their colours
  int64_t max_heatmap_side = 256;    // heatmap pixels a side (tiles of devices above)
  std::string id_prefix = "l";       // prefix of ids inside the SVG (unique per page)
};

/// How the mesh is laid out on a page: axes [0, split) down the rows, [split, rank) across.
/// A 1-D mesh of more than 16 devices is wrapped in rows of ceil(sqrt(n)) (split 0).
struct MeshGrid {
  int split = 0;
  int64_t rows = 1, cols = 1;
  std::string rows_label, cols_label;  // "data=2", "fsdp=2 x model=4", "devices in rows of 128"
};
MeshGrid pick_mesh_grid(const DeviceMesh& mesh);

/// The tensor dimensions a 2-D drawing shows: down (-1: none, rank < 2) and across (-1: none,
/// rank 0), and a sentence naming what is shown when rank > 2 (empty otherwise).
struct TensorDims {
  int row_dim = -1, col_dim = -1;
  std::string note;
};
TensorDims pick_tensor_dims(const ShardGeometry& geometry);

struct LayoutDrawing {
  std::string tensor_svg;  // <svg>: the tensor (its 2-D slice) cut into boxes
  std::string mesh_svg;    // <svg>: the mesh grid, each device's box
  int tensor_width = 0, tensor_height = 0, mesh_width = 0, mesh_height = 0;
  bool colour_per_device = true;   // false: coloured by box (a heatmap mesh)
  std::vector<std::string> notes;  // what was aggregated or left out, and the slice shown
};

/// Both pictures of `geometry`'s layout.
LayoutDrawing draw_layout(const ShardGeometry& geometry, const LayoutDrawOptions& options = {});

/// A standalone SVG file: a heading (shape, layout, blocks, replicas), the notes, the tensor
/// and the mesh side by side.
std::string render_layout_svg_document(const ShardGeometry& geometry,
                                       const LayoutDrawOptions& options = {});

}  // namespace meshlayout
