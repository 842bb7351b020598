// plan_command.h — `meshlayout plan`: where every tensor of a checkpoint would go on a target
// mesh under a rules file, read from the safetensors header(s) only (never the data).
//
//   meshlayout plan model.safetensors --rules rules.json [--mesh data=2,model=4]
//       [--mode search|fullmatch|first] [--json] [--strict] [--replicated-warn-bytes 16MiB]
//       [--optimizer sgd|adam|adamw [--zero1 | --shard-slots-over AXIS]]
//       [--names auto|keras|file] [--html FILE]
//       [--batch N --seq N [--recompute none|attention|block]] [--cache-length N]
//       [--device-memory 80GiB]
//
// FILE is a .safetensors file, a *.safetensors.index.json or a directory holding either. A
// Hugging Face Llama directory is planned by its Keras variable paths (F32, as the model holds
// them), so a rules file plans here as it trains and generates; --names file plans the names
// written in the file instead.
// The mesh is --mesh if given, else the rules file's "mesh"; neither is an error. The mesh
// describes the target machine: its devices need not exist here (the command lifts the
// process's device count to kMaxMeshDevices, as `layout` and `match` do), so a 64-device plan
// runs on a laptop.
//
// Text output: one aligned line per tensor (tensor, dtype, shape, bytes, rule index and
// pattern, layout, largest shard shape and bytes, note), the rules with their tensor counts,
// a per-device table (bytes each device would hold), then warnings and errors
// (checkpoint_plan.h lists them). --json prints one object:
//   {"source", "files", "mesh": {"text", "shape", "axis_names"}, "mode", "strict",
//    "replicated_warn_bytes", "rules": [{"index", "pattern", "layout", "tensors"}],
//    "tensors": [{"path", "file", "dtype", "shape", "bytes", "rule", "pattern", "layout",
//                 "shard_shape", "shard_bytes", "replicas", "uneven", "error"?}],
//    "devices": [{"device", "coords", "bytes"}],
//    "totals": {"tensors", "bytes", "sharded", "replicated", "errors", "warnings",
//               "device_bytes_sum", "device_bytes_max"},
//    "warnings": [{"kind", "tensor"?, "rule"?, "message"}], "errors": [same]}
// With --optimizer, the training footprint per device follows (training_plan.h): weights,
// gradients and optimizer slots in float32; in JSON under "training". --zero1 plans ZeRO-1:
// slots sharded further over the data axis (the mesh's first axis, ModelParallel's default
// batch_dim_name); --shard-slots-over AXIS over another axis (optimizer.h's zero1_slot_layout).
// The text says "ZeRO-1 on" with the axis; JSON has "training"."zero1": {"axis", "axis_size"}.
// The memory plan (memory_plan.h; a Hugging Face model directory, whose config.json gives the
// activations' shapes): --batch and --seq (with --optimizer) add one training step's
// activations, --recompute what its backward recomputes (default attention, the Llama's own),
// --cache-length generation's key/value cache for --batch rows, --device-memory whether each
// device's peak fits. Text: a table per device (weights, grads, slots, activations, cache,
// reshard temp, peak, fits?); JSON: "memory" (memory_json). Exit code 3 when a peak does not fit.
// ("rule", "pattern" and "layout" are null for a tensor no rule matches; a tensor that cannot
// be placed has no shard fields and has "error".)
//
// --html FILE also writes the plan as one self-contained HTML page (plan/plan_html.h: per
// layout the tensor cut into boxes and the mesh grid, a bar chart of each device's bytes by
// kind, the warnings), whole or not at all (plan/output_file.h), before anything is printed;
// the text output then ends with `picture: FILE`.
//
// Exit code: 0 when the plan has no errors, 2 when it has some (ambiguous path, rank
// mismatch, --strict uneven split; the plan is still printed), 1 for a file or rules file
// that cannot be read (main.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/plan/checkpoint_plan.h"

namespace meshlayout::cli {

struct PlanCommandOptions {
  std::string path;
  std::string rules_path;
  std::optional<std::string> mesh;  // overrides the rules file's mesh
  std::optional<std::string> mode;  // overrides the rules file's mode
  bool json = false;
  bool strict = false;
  uint64_t replicated_warn_bytes = kDefaultReplicatedWarnBytes;
  std::optional<std::string> optimizer;         // also plan training with this optimizer
  bool zero1 = false;                           // ZeRO-1 over the mesh's first (data) axis
  std::optional<std::string> shard_slots_over;  // ZeRO-1 over this axis
  /// Which names rules are matched against: "auto" (default) — a Hugging Face Llama directory
  /// (config.json beside the weights) is planned by its model's Keras variable paths and F32
  /// shapes, as generate and train build it, any other checkpoint by its tensor names;
  /// "keras" — Keras paths, the path must be a Llama directory; "file" — the tensor names in
  /// the file, as written.
  std::string names = "auto";
  /// Also write the plan as one self-contained HTML page (plan/plan_html.h) to this file.
  std::optional<std::string> html;
  // The memory plan (memory_plan.h): batch and seq of a training step, the key/value cache's
  // positions, what the backward recomputes, the device memory to fit.
  int64_t batch = 0, seq = 0, cache_length = 0;
  std::string recompute = "attention";
  std::optional<std::string> device_memory;
};

/// Exit code when the plan was printed but has errors.
inline constexpr int kPlanHasErrorsExitCode = 2;
/// Exit code when the plan has no errors but some device's peak exceeds --device-memory.
inline constexpr int kPlanDoesNotFitExitCode = 3;

/// Runs the command; returns the process exit code (0, kPlanHasErrorsExitCode or
/// kPlanDoesNotFitExitCode).
int run_plan(const PlanCommandOptions& options, std::ostream& out);

using meshlayout::parse_byte_count;  // core/byte_size.h

void add_plan_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
