// reshard_command.h — `meshlayout reshard`: plan a layout change, run it on random data,
// check the result bit for bit and print the time. Works unchanged under mpirun.
//
//   meshlayout reshard --shape 4096,4096 --dtype f32 --mesh data=2,model=4
//                      --from "data,None" --to "None,model"
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>

#include "meshlayout/runtime/runtime.h"

namespace meshlayout::cli {

struct ReshardCommandOptions {
  std::string shape;
  std::string dtype = "f32";
  std::string mesh;
  std::string from;
  std::string to;
  uint64_t seed = 1;
  int repeat = 3;
  bool show_transfers = false;
};

/// Runs the command on `runtime` (every process calls it); returns the exit code. Output is
/// printed by process 0 only.
int run_reshard(const ReshardCommandOptions& options, const std::shared_ptr<Runtime>& runtime,
                std::ostream& out);

void add_reshard_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
