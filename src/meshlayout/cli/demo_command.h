// demo_command.h — `meshlayout demo`: the README's main job. A small transformer-style model
// (embedding, LayerNorm + MLP blocks, lm_head) on a 2x4 mesh of virtual devices under regex
// rules: prints the plan (from shapes alone) and a layout grid, materialises the model sharded,
// runs a forward pass and checks it against the same model on one device (loaded from the
// checkpoint it saves), reloads the checkpoint into another sharding and checks again, and
// prints timings and per-device memory. Exits non-zero if a check fails.
//
// Example:
//   meshlayout demo                              # MESHLAYOUT_CPU_DEVICES=8 is the default
//   meshlayout demo --checkpoint /tmp/tiny.safetensors   # keep the checkpoint it writes
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>

namespace meshlayout::cli {

struct DemoOptions {
  std::string checkpoint;  // where to save; empty: a temporary file, removed at the end
  bool progress = false;   // progress bars on stderr
};

/// Runs the demo; returns the process exit code (non-zero if a check fails).
int run_demo(std::ostream& out, const DemoOptions& options = {});

void add_demo_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
