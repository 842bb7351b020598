// demo_command.h — `meshlayout demo`: the README's main job. On a 2x4 mesh of virtual devices
// (batch=2, model=4): writes a small random Llama (grouped-query attention, tied embeddings) in
// Hugging Face format, prints keras-hub's layout rules, the plan from the headers alone and a
// layout grid, builds the model sharded and loads it (each device reading only its boxes),
// generates greedily, checks logits and tokens against the same checkpoint on one device, saves
// the model shard by shard under its Keras paths and reloads it into Megatron's sharding (2
// key/value heads over 4 devices) and checks again, and lists rules that match nothing.
// Prints timings and per-device memory. Exits non-zero if a check fails.
//
// Example:
//   meshlayout demo                          # MESHLAYOUT_CPU_DEVICES=8 is the default
//   meshlayout demo --family qwen3           # the same story for a Qwen 3
//   meshlayout demo --keep /tmp/demo         # keep /tmp/demo/llama/ and
//   /tmp/demo/llama.safetensors
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>

namespace meshlayout::cli {

struct DemoOptions {
  std::string keep_dir;   // where to write the model and checkpoint; empty: a temporary
                          // directory, removed at the end
  bool progress = false;  // progress bars on stderr
  /// The model family (LlamaConfig::family, kLlamaFamilies): "llama", "mistral", "qwen2", …
  std::string family = "llama";
};

/// Runs the demo; returns the process exit code (non-zero if a check fails).
int run_demo(std::ostream& out, const DemoOptions& options = {});

void add_demo_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
