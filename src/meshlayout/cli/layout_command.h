// layout_command.h — `meshlayout layout`: the shard grid and every device's box for a tensor
// shape under a layout on a mesh.
//
//   meshlayout layout --mesh data=2,model=4 --layout "data,None" --shape 8,6 [--strict]
//       [--max-devices N] [--svg FILE]
//
// --svg FILE also writes the layout as one standalone SVG picture (plan/layout_svg.h: the
// tensor cut into boxes coloured by the devices holding them, and the mesh grid), written
// whole or not at all (plan/output_file.h); the text is printed as without it.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <optional>
#include <string>

namespace meshlayout::cli {

struct LayoutOptions {
  std::string mesh;
  std::string layout;
  std::string shape;
  bool strict = false;
  /// Devices listed one per line (and the block table drawn) up to this many; 0 = all.
  int64_t max_devices = 256;
  /// Also write the layout as an SVG picture to this file.
  std::optional<std::string> svg;
};

/// Runs the command; returns the process exit code.
int run_layout(const LayoutOptions& options, std::ostream& out);

void add_layout_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
