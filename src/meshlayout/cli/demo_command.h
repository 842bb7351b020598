// demo_command.h — `meshlayout demo`: the README's main job, a short tour on the default
// virtual mesh (2×4 over list_devices()): mesh, layouts, a LayoutMap with transformer rules,
// which rule each variable gets, a shard grid, an explanation and the unused-rule check.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>

namespace meshlayout::cli {

/// Runs the tour; returns the process exit code (non-zero if a check fails).
int run_demo(std::ostream& out);

void add_demo_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
