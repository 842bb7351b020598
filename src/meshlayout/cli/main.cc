// meshlayout — the command-line tool. Each subcommand lives in <verb>_command.{h,cc}; this
// file only registers them and turns errors into exit codes (1 for a meshlayout error, with
// the message on stderr; CLI11's codes for usage errors).
#include <CLI/CLI.hpp>
#include <iostream>

#include "meshlayout/cli/demo_command.h"
#include "meshlayout/cli/layout_command.h"
#include "meshlayout/cli/match_command.h"
#include "meshlayout/cli/reshard_command.h"
#include "meshlayout/core/errors.h"

int main(int argc, char** argv) {
  CLI::App app{
      "meshlayout: Keras-style device meshes, tensor layouts and regex layout maps on virtual "
      "CPU devices and MPI processes."};
  app.require_subcommand(1);
  int exit_code = 0;
  meshlayout::cli::add_demo_command(app, &exit_code);
  meshlayout::cli::add_match_command(app, &exit_code);
  meshlayout::cli::add_layout_command(app, &exit_code);
  meshlayout::cli::add_reshard_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const meshlayout::Error& e) {
    std::cerr << "meshlayout: error: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
