// command_agreement.h — what the processes of an mpirun compare before a command's first
// collective, so that processes told or reading different things fail together, at once, with
// a message naming the first difference (they used to deadlock, or train a mixed model):
//   * every option of the command as parsed, read from the CLI11 subcommand itself
//     (record_parsed_options, which main.cc installs on every subcommand): an option added
//     later is compared without anyone listing it;
//   * a digest of every input that determines the computation (InputDigest): the parsed
//     config.json, the bytes of rules files, the headers and sizes of safetensors files, and
//     whether optional files (a saved optimizer state) are present.
// Processes whose weights differ under identical headers are not caught (it would mean
// reading every byte twice); see docs/design.md §4, "Errors".
//
// Example (every process):
//   InputDigest inputs;
//   inputs.add_text("rules file 'r.json'", rules_text);
//   inputs.add_checkpoint("weights", checkpoint);
//   agree_on_command(runtime, "the train command", {"--mesh=mesh[batch=2,model=4]"}, inputs);
//   // a process whose r.json differs: every process throws
//   // ValueError: processes disagree on the train command: process 1 has rules file 'r.json'=
//   //   fnv1a 9c2e…, 212 bytes but process 0 has rules file 'r.json'=fnv1a 41d0…, 230 bytes
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {
class Checkpoint;
class Runtime;
}  // namespace meshlayout

namespace meshlayout::cli {

/// "--name=value" for every option of `command` (not --help), in the order they were added:
/// the values as given (several joined by ','), "(unset)" for an option not given; then
/// "unexpected arguments=…" if some argument was taken by no option.
std::vector<std::string> describe_parsed_options(const CLI::App& command);

/// Remembers describe_parsed_options(command) for agree_on_command (main.cc calls it on the
/// subcommand being run, after parsing and before its callback). Library callers that never
/// parse a command line have nothing recorded; clear_parsed_options() forgets it.
void record_parsed_options(const CLI::App& command);
void clear_parsed_options();
std::vector<std::string> recorded_parsed_options();

/// Digests of the inputs a command read, as description fields "label=…".
class InputDigest {
 public:
  /// `label`'s content: "label=fnv1a <16 hex digits>, <n> bytes".
  void add_text(std::string_view label, std::string_view bytes);
  /// Every file of the checkpoint: its size and a digest of its header as parsed (tensor
  /// names, dtypes, shapes, offsets, metadata), one field per file.
  void add_checkpoint(std::string_view label, const Checkpoint& checkpoint);
  /// An optional input that is not there: "label=absent".
  void add_absent(std::string_view label);

  const std::vector<std::string>& fields() const { return fields_; }

 private:
  std::vector<std::string> fields_;
};

/// Collective (a no-op in one process): agree_on_operation over `fields` (what the command
/// resolved: the mesh, devices per process, …), the device memory budget
/// (MESHLAYOUT_DEVICE_MEMORY), then the recorded parsed options, then `inputs` — in that order, so
/// the message names the most telling difference first. Every process throws the same ValueError
/// naming `what` and the first field that differs. `local_error`, if set, is agreed first (every
/// process throws it; see agree_on_operation).
void agree_on_command(Runtime& runtime, std::string_view what, std::vector<std::string> fields,
                      const InputDigest& inputs, const std::exception_ptr& local_error = nullptr);

}  // namespace meshlayout::cli
