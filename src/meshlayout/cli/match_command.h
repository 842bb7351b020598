// match_command.h — `meshlayout match`: which rule and layout each variable path gets.
//
// Reads paths from a stream, one per line, and writes one JSON object per line:
//   {"path": "d1/kernel", "rule": 0, "pattern": "d1.*", "layout": [null, "model"]}
//   {"path": "x", "rule": null, "pattern": null, "layout": null}
//   {"path": "dense/kernel", "error": "Path 'dense/kernel' matches multiple …"}
// With stats, `lookups=<n> seconds=<s> lookups_per_s=<r>` goes to the error stream,
// timing the lookups only.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <optional>
#include <string>

#include "meshlayout/layout_map/layout_map.h"

namespace meshlayout::cli {

struct MatchOptions {
  std::string rules_path;
  std::optional<std::string> mode;  // overrides the rules file's mode
  bool stats = false;
  bool explain = false;      // human-readable explanation instead of JSON
  bool warn_unused = false;  // list rules that matched no path on the error stream
};

/// Runs the command; returns the process exit code.
int run_match(const MatchOptions& options, std::istream& in, std::ostream& out, std::ostream& err);

/// Registers the subcommand on `app`.
void add_match_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
