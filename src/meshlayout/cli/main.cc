// meshlayout — the command-line tool. Each subcommand lives in <verb>_command.{h,cc}; this
// file only registers them and turns errors into exit codes (1 for a meshlayout error, with
// the message on stderr; CLI11's codes for usage errors). Started by mpirun, it first joins
// the processes into one runtime (initialize()), so `reshard` runs across them unchanged.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <new>

#include "meshlayout/cli/chat_command.h"
#include "meshlayout/cli/cli_checks.h"
#include "meshlayout/cli/command_agreement.h"
#include "meshlayout/cli/demo_command.h"
#include "meshlayout/cli/generate_command.h"
#include "meshlayout/cli/inspect_command.h"
#include "meshlayout/cli/layout_command.h"
#include "meshlayout/cli/match_command.h"
#include "meshlayout/cli/plan_command.h"
#include "meshlayout/cli/reshard_command.h"
#include "meshlayout/cli/rules_command.h"
#include "meshlayout/cli/tokenize_command.h"
#include "meshlayout/cli/train_command.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/runtime.h"
#ifdef MESHLAYOUT_WITH_MPI
#include "meshlayout/runtime/mpi/initialize.h"
#include "meshlayout/runtime/mpi/mpi_sanitizer_defaults.h"
#endif

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
  meshlayout::cli::add_inspect_command(app, &exit_code);
  meshlayout::cli::add_plan_command(app, &exit_code);
  meshlayout::cli::add_generate_command(app, &exit_code);
  meshlayout::cli::add_chat_command(app, &exit_code);
  meshlayout::cli::add_train_command(app, &exit_code);
  meshlayout::cli::add_tokenize_command(app, &exit_code);
  meshlayout::cli::add_rules_command(app, &exit_code);
  // "process 2: " when several processes run the command. Each message is one write, so the
  // lines of processes sharing a terminal (mpirun merges them) do not interleave.
  std::string where;
  std::shared_ptr<meshlayout::Runtime> runtime;  // set when started by mpirun with several
  try {
#ifdef MESHLAYOUT_WITH_MPI
    if (meshlayout::launched_by_mpirun()) {
      runtime = meshlayout::initialize(&argc, &argv);
      if (runtime->num_processes() > 1) {
        where = fmt::format("process {}: ", runtime->process_id());
      } else {
        runtime.reset();
      }
    }
#endif
    // Processes compare every option of the command they run, as parsed, before it starts:
    // the commands that run collectives (reshard, generate, train) fold them into their own
    // agreement with what they resolved and read (command_agreement.h); the others agree here.
    for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      sub->parse_complete_callback([sub, runtime] {
        meshlayout::cli::check_option_values(*sub);
        meshlayout::cli::record_parsed_options(*sub);
        const std::string& name = sub->get_name();
        const bool agrees_itself = name == "reshard" || name == "generate" || name == "train";
        if (runtime && !agrees_itself) {
          meshlayout::cli::agree_on_command(*runtime, fmt::format("the {} command", name), {}, {});
        }
      });
    }
    // CLI11 would only say "A subcommand is required" for `meshlayout frobnicate`.
    if (auto unknown = meshlayout::cli::unknown_subcommand(app, argc, argv)) {
      throw CLI::ExtrasError(*unknown, CLI::ExitCodes::ExtrasError);
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A command line one process cannot parse (MPMD launches give processes their own): the
    // others are waiting in the options agreement, so this process joins it with its error
    // and every process ends at once (the others with "process N failed: …").
    if (runtime) {
      try {
        meshlayout::cli::agree_on_command(*runtime, "the command line", {}, {},
                                          std::make_exception_ptr(meshlayout::ValueError(
                                              fmt::format("its command line: {}", e.what()))));
      } catch (...) {  // the agreed error is this process's own parse error, reported below
      }
    }
    return app.exit(e);
  } catch (const meshlayout::Error& e) {
    std::cerr << fmt::format("meshlayout: {}error: {}\n", where, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << fmt::format(
        "meshlayout: {}error: out of memory (an allocation the machine could not satisfy)\n",
        where);
    return 1;
  } catch (const std::exception& e) {  // a bug: say so rather than abort
    std::cerr << fmt::format("meshlayout: {}internal error: {}\n", where, e.what());
    return 1;
  }
  return exit_code;
}
