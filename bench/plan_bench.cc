// `meshlayout plan` on a large header, against parsing the same header's JSON in the same run.
//
//   build/bench/plan_bench [--layers L] [--reps R] [--dir DIR]
//
// Workload: a decoder of L layers (default 5,000; 20 tensors a layer, so 100,003 tensors with
// the embedding, final norm and lm_head), named as Keras 3 / Flax paths do:
// `model/layers_17/attn/q_proj/kernel`, `…/attn/q_norm/scale`, `…/mlp/down_proj/bias`, …;
// hidden 512, MLP 2048, vocabulary 32,001 (uneven on purpose: one warning), kernels BF16,
// norms F32. The file is the header followed by a sparse data section (ftruncate), ~40 GiB
// apparent, nothing written. Rules: 8 Megatron-style rules on a data=2,model=8 mesh (norms
// and output-projection biases are left to no rule, i.e. replicated).
//
// Measured, median of R runs (default 5):
//   baseline          nlohmann::json::parse of the header's JSON text (in memory)
//   Checkpoint::open  read + parse + validate the header from the file
//   plan_checkpoint   rule lookup, shard geometry, per-device totals, issues
//   render text/json  the two outputs (strings)
//   run_plan          the whole command (rules file, open, plan, render, write to /dev/null),
//                     text and --json; the target is under 1 s.
// ratio = time / baseline time (how many JSON parses each step costs).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/cli/plan_command.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/plan/checkpoint_plan.h"
#include "meshlayout/plan/plan_render.h"

using namespace meshlayout;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kHidden = 512, kMlp = 2048, kVocab = 32001;

constexpr const char* kRules = R"({
  "mesh": {"shape": [2, 8], "axis_names": ["data", "model"]},
  "mode": "search",
  "rules": [
    ["attn/(q|k|v)_proj/kernel", [null, "model"]],
    ["attn/(q|k|v)_proj/bias", ["model"]],
    ["attn/o_proj/kernel", ["model", null]],
    ["mlp/(gate|up)_proj/kernel", [null, "model"]],
    ["mlp/(gate|up)_proj/bias", ["model"]],
    ["mlp/down_proj/kernel", ["model", null]],
    ["embed_tokens/embedding", ["model", null]],
    ["lm_head/kernel", [null, "model"]]
  ]
})";

std::vector<TensorSpec> decoder_specs(int layers) {
  std::vector<TensorSpec> specs;
  specs.reserve(static_cast<size_t>(layers) * 20 + 3);
  specs.push_back({"model/embed_tokens/embedding", DType::kBF16, {kVocab, kHidden}});
  for (int i = 0; i < layers; ++i) {
    const std::string layer = fmt::format("model/layers_{}/", i);
    for (const char* p : {"q", "k", "v", "o"}) {
      specs.push_back(
          {fmt::format("{}attn/{}_proj/kernel", layer, p), DType::kBF16, {kHidden, kHidden}});
      specs.push_back({fmt::format("{}attn/{}_proj/bias", layer, p), DType::kBF16, {kHidden}});
    }
    for (const char* p : {"gate", "up"}) {
      specs.push_back(
          {fmt::format("{}mlp/{}_proj/kernel", layer, p), DType::kBF16, {kHidden, kMlp}});
      specs.push_back({fmt::format("{}mlp/{}_proj/bias", layer, p), DType::kBF16, {kMlp}});
    }
    for (const char* p : {"q", "k"}) {  // QK-norm (Qwen3, Gemma 3)
      specs.push_back({fmt::format("{}attn/{}_norm/scale", layer, p), DType::kF32, {kHidden}});
    }
    specs.push_back({layer + "mlp/down_proj/kernel", DType::kBF16, {kMlp, kHidden}});
    specs.push_back({layer + "mlp/down_proj/bias", DType::kBF16, {kHidden}});
    for (const char* n : {"input_norm", "post_attention_norm"}) {
      specs.push_back({fmt::format("{}{}/scale", layer, n), DType::kF32, {kHidden}});
      specs.push_back({fmt::format("{}{}/bias", layer, n), DType::kF32, {kHidden}});
    }
  }
  specs.push_back({"model/final_norm/scale", DType::kF32, {kHidden}});
  specs.push_back({"lm_head/kernel", DType::kBF16, {kHidden, kVocab}});
  return specs;
}

double median_ms(int reps, const std::function<void()>& fn) {
  return 1e3 * bench::median_seconds(
                   reps, [] {}, fn);
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 5000, reps = 5;
  fs::path dir = fs::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--layers")
      layers = std::atoi(argv[i + 1]);
    else if (flag == "--reps")
      reps = std::atoi(argv[i + 1]);
    else if (flag == "--dir")
      dir = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: plan_bench [--layers L] [--reps R] [--dir DIR]\n");
      return 2;
    }
  }
  set_device_count(kMaxMeshDevices);  // as `meshlayout plan` does: the mesh is only described

  // The checkpoint: header, then a sparse data section.
  const std::string path =
      (dir / fmt::format("meshlayout_plan_bench_{}.safetensors", ::getpid())).string();
  const std::string rules_path =
      (dir / fmt::format("meshlayout_plan_bench_{}.rules.json", ::getpid())).string();
  const SafetensorsHeader header = make_safetensors_header(decoder_specs(layers));
  const std::string head = safetensors_header_bytes(header);
  {
    std::ofstream(path, std::ios::binary) << head;
    std::ofstream(rules_path) << kRules;
    if (::truncate(path.c_str(), static_cast<off_t>(header.file_bytes())) != 0) {
      std::fprintf(stderr, "plan_bench: cannot extend %s\n", path.c_str());
      return 1;
    }
  }
  const std::string_view json(head.data() + 8, head.size() - 8);
  const LayoutMap map = load_rules_file(rules_path).to_layout_map();

  // One plan outside the timings, to print its shape and check it.
  const Checkpoint ckpt = Checkpoint::open(path);
  const CheckpointPlan plan = plan_checkpoint(ckpt, map);
  std::printf(
      "checkpoint: %zu tensors, header %.1f MiB, data %.1f GiB (sparse); %zu rules on "
      "%s; plan: %zu placements, %zu sharded, %zu replicated, %zu warnings, %zu errors; "
      "median of %d\n\n",
      ckpt.tensors().size(), static_cast<double>(head.size()) / (1 << 20),
      static_cast<double>(header.data_bytes) / (1 << 30), map.size(), plan.mesh.to_string().c_str(),
      plan.placements.size(), plan.num_sharded, plan.num_replicated, plan.num_warnings,
      plan.num_errors, reps);

  size_t sink = 0;
  const double parse_ms = median_ms(reps, [&] { sink += nlohmann::json::parse(json).size(); });
  const double open_ms = median_ms(reps, [&] { sink += Checkpoint::open(path).tensors().size(); });
  const double plan_ms =
      median_ms(reps, [&] { sink += plan_checkpoint(ckpt, map).tensors.size(); });
  const double text_ms = median_ms(reps, [&] { sink += render_plan_text(plan).size(); });
  const double json_ms = median_ms(reps, [&] { sink += render_plan_json(plan).size(); });
  std::ofstream devnull("/dev/null");
  const double run_text_ms = median_ms(
      reps, [&] { sink += cli::run_plan({.path = path, .rules_path = rules_path}, devnull); });
  const double run_json_ms = median_ms(reps, [&] {
    sink += cli::run_plan({.path = path, .rules_path = rules_path, .json = true}, devnull);
  });

  std::printf("%-36s %9s %7s\n", "step", "ms", "ratio");
  auto row = [&](const char* step, double ms) {
    std::printf("%-36s %9.1f %7.2f\n", step, ms, ms / parse_ms);
  };
  row("baseline: nlohmann::json::parse", parse_ms);
  row("Checkpoint::open (parse + validate)", open_ms);
  row("plan_checkpoint", plan_ms);
  row("render_plan_text", text_ms);
  row("render_plan_json", json_ms);
  row("run_plan end to end (text)", run_text_ms);
  row("run_plan end to end (--json)", run_json_ms);
  const double worst = std::max(run_text_ms, run_json_ms);
  std::printf("\nrun_plan on %zu tensors: %.0f ms, %s the 1 s target\n", ckpt.tensors().size(),
              worst, worst < 1000 ? "under" : "OVER");
  std::printf("(text %zu bytes, json %zu bytes; sink %zu)\n", render_plan_text(plan).size(),
              render_plan_json(plan).size(), sink);
  fs::remove(path);
  fs::remove(rules_path);
  return worst < 1000 ? 0 : 1;
}
