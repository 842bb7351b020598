#include "meshlayout/cli/layout_command.h"

#include <fmt/format.h>

#include <iostream>

#include "meshlayout/core/shape.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/layout_grid.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/plan/layout_svg.h"
#include "meshlayout/plan/output_file.h"

namespace meshlayout::cli {

int run_layout(const LayoutOptions& options, std::ostream& out) {
  DeviceMesh mesh = DeviceMesh::from_string(options.mesh);
  TensorLayout layout = TensorLayout::from_string(options.layout);
  if (!layout.device_mesh()) layout.set_device_mesh(mesh);
  Shape shape = parse_shape(options.shape);
  ShardGeometry geometry(layout, shape, GeometryOptions{.strict = options.strict});
  if (options.svg) {  // written first: a path that cannot be written fails before any output
    write_output_file(*options.svg, render_layout_svg_document(geometry), "--svg");
  }
  out << fmt::format("tensor {} as {}\n", shape_to_string(shape), layout.to_string());
  std::string blocks;
  for (int d = 0; d < geometry.rank(); ++d) {
    blocks += fmt::format("{}{}", d ? " x " : "", geometry.num_blocks(d));
  }
  out << fmt::format("blocks {}; {} replica{}; largest box {} elements\n",
                     blocks.empty() ? "1" : blocks, geometry.num_replicas(),
                     geometry.num_replicas() == 1 ? "" : "s", geometry.max_box_elements());
  for (const UnevenDim& u : geometry.uneven_dims()) {
    out << fmt::format("uneven: dimension {} (size {}) in {} blocks of {}; the last are shorter\n",
                       u.dim, u.size, u.parts, ceil_div(u.size, u.parts));
  }
  const bool all = options.max_devices <= 0 || mesh.size() <= options.max_devices;
  if (geometry.rank() <= 2 && all) out << render_layout_grid(geometry);
  if (!all) {
    out << fmt::format("block table omitted: {} devices (more than --max-devices {})\n",
                       mesh.size(), options.max_devices);
  }
  out << render_device_boxes(geometry, options.max_devices);
  if (options.svg) out << fmt::format("picture: {}\n", *options.svg);
  return 0;
}

void add_layout_command(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<LayoutOptions>();
  CLI::App* cmd = app.add_subcommand(
      "layout", "Print which devices hold which block of a tensor, and every device's box.");
  cmd->add_option("--mesh", options->mesh, "mesh, e.g. data=2,model=4 or mesh[data=2,model=4]")
      ->required();
  cmd->add_option("--layout", options->layout,
                  "one entry per dimension: None, an axis, or (axis,axis); e.g. \"data,None\"")
      ->required();
  cmd->add_option("--shape", options->shape, "tensor shape, e.g. 8,6")->required();
  cmd->add_flag("--strict", options->strict, "refuse uneven splits");
  cmd->add_option("--max-devices", options->max_devices,
                  "list at most this many devices (and draw the block table only up to it); "
                  "0 lists all (default 256)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--svg", options->svg,
                  "also draw the layout as an SVG picture in this file: the tensor cut into "
                  "boxes coloured by the devices holding them, and the mesh grid (a heatmap "
                  "above 1024 devices)");
  cmd->callback([options, exit_code] {
    set_device_count(kMaxMeshDevices);  // planning only: no device is used
    *exit_code = run_layout(*options, std::cout);
  });
}

}  // namespace meshlayout::cli
