// layout_command.h — `meshlayout layout`: the shard grid and every device's box for a tensor
// shape under a layout on a mesh.
//
//   meshlayout layout --mesh data=2,model=4 --layout "data,None" --shape 8,6 [--strict]
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>

namespace meshlayout::cli {

struct LayoutOptions {
  std::string mesh;
  std::string layout;
  std::string shape;
  bool strict = false;
  /// Devices listed one per line (and the block table drawn) up to this many; 0 = all.
  int64_t max_devices = 256;
};

/// Runs the command; returns the process exit code.
int run_layout(const LayoutOptions& options, std::ostream& out);

void add_layout_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
