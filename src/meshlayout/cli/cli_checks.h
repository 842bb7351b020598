// cli_checks.h — checks on the command line and on standard input that CLI11 and iostreams do
// not make: an unknown subcommand named (with the list of subcommands), whole numbers in
// range (CLI11 wraps "-1" and 2^64 into a uint64_t), and a read error on stdin (a directory
// as stdin reads as an empty file); and agreeing on a failure of the commands' checks across
// the processes of an mpirun.
//
// Example:
//   cmd->add_option("--seed", seed)->check(kUint64Text);
//   if (auto msg = unknown_subcommand(app, argc, argv)) { std::cerr << *msg; return 109; }
//   check_read(std::cin, "the paths on standard input");
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <istream>
#include <optional>
#include <string>
#include <string_view>

namespace meshlayout {
class Runtime;
}

namespace meshlayout::cli {

/// Accepts only a decimal whole number from 0 to 2^64-1 (no sign, no wrap-around).
extern const CLI::Validator kUint64Text;

/// When the first argument is not an option and names no subcommand of `app`, the message
/// "unknown subcommand 'x'; expected one of: demo, match, …" (subcommands in order).
std::optional<std::string> unknown_subcommand(const CLI::App& app, int argc,
                                              const char* const* argv);

/// Checks every value given to an option of `command` that CLI11 would take silently:
/// an empty value ("--learning-rate ''" used the default, "--save ''" saved nothing), and for
/// integer options anything but a plain decimal number that fits (CLI11 clamps
/// 99999999999999999999 to 2^63-1 and reads "010" as octal 8). Throws CLI::ValidationError
/// naming the option and the value. main.cc runs it on the subcommand being run.
void check_option_values(const CLI::App& command);

/// Throws ValueError when `in` failed to read (not merely reached its end): stream errors, and
/// for std::cin the C stream's error flag with errno's reason (e.g. stdin is a directory).
void check_read(std::istream& in, std::string_view what);

/// In one process the error as it is; across processes, agreed (agree_on_failure: every
/// process throws it, none is left waiting).
void agree_or_rethrow(Runtime& runtime, const std::exception_ptr& failure);

}  // namespace meshlayout::cli
