#include "meshlayout/cli/demo_command.h"

#include <fmt/format.h>

#include <iostream>

#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/layout_grid.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout_map/layout_map.h"

namespace meshlayout::cli {
namespace {

struct DemoVariable {
  std::string path;
  Shape shape;
};

// Keras 3 scope paths of a two-block transformer (d_model 64, 4 heads of 16, MLP 256).
std::vector<DemoVariable> transformer_variables() {
  std::vector<DemoVariable> v{{"token_embedding/embeddings", {1000, 64}}};
  for (int b = 0; b < 2; ++b) {
    const std::string block = fmt::format("decoder_block_{}", b);
    for (const char* proj : {"query", "key", "value"}) {
      v.push_back({fmt::format("{}/attention/{}/kernel", block, proj), {64, 4, 16}});
    }
    v.push_back({block + "/attention/attention_output/kernel", {4, 16, 64}});
    v.push_back({block + "/pre_attention_norm/scale", {64}});
    v.push_back({block + "/ffw_gating/kernel", {64, 256}});
    v.push_back({block + "/ffw_linear/kernel", {256, 64}});
  }
  v.push_back({"final_norm/scale", {64}});
  return v;
}

}  // namespace

int run_demo(std::ostream& out) {
  const std::vector<std::string> devices = list_devices();
  out << fmt::format("devices: {} virtual CPU devices ({} … {})\n\n", devices.size(),
                     devices.front(), devices.back());
  if (devices.size() < 8) {
    out << fmt::format("the demo needs 8 devices; set {}=8 or more\n", kCpuDevicesEnvVar);
    return 1;
  }
  std::vector<std::string> first8(devices.begin(), devices.begin() + 8);
  DeviceMesh mesh({2, 4}, {"data", "model"}, first8);
  out << "1. A 2x4 mesh: " << mesh << "\n\n";

  LayoutMap layout_map(mesh, MatchMode::kSearch);
  layout_map["token_embedding/embeddings"] = {"model", None};
  layout_map["attention/(query|key|value)/kernel"] = {None, "model", None};
  layout_map["attention_output/kernel"] = {"model", None, None};
  layout_map["ffw_gating/kernel"] = {None, "model"};
  layout_map["ffw_linear/kernel"] = {"model", None};
  layout_map["lm_head/kernel"] = {None, "model"};  // this model has no lm_head
  out << "2. A LayoutMap with " << layout_map.size()
      << " rules (mode search, as Keras 3.0-3.13):\n";
  for (size_t i = 0; i < layout_map.size(); ++i) {
    out << fmt::format("   [{}] {:<36} -> {}\n", i, layout_map.rule(i).pattern,
                       layout_map.rule(i).layout.to_string());
  }

  out << "\n3. Which layout each variable gets, and its per-device shard:\n";
  std::vector<std::string> paths;
  int64_t total_bytes = 0, max_device_bytes = 0;
  std::vector<int64_t> device_bytes(8, 0);
  for (const DemoVariable& var : transformer_variables()) {
    paths.push_back(var.path);
    std::optional<TensorLayout> layout = layout_map.get(var.path);
    TensorLayout applied =
        layout ? *layout : TensorLayout::replicated(static_cast<int>(var.shape.size()), mesh);
    ShardGeometry g(applied, var.shape, {}, "variable '" + var.path + "'");
    out << fmt::format("   {:<50} {:<14} {:<24} shard {}\n", var.path,
                       shape_to_string(var.shape),
                       layout ? applied.to_string().substr(0, applied.to_string().find('@'))
                              : std::string("replicated (no rule)"),
                       shape_to_string(g.box(0).shape));
    total_bytes += num_elements(var.shape) * 4;
    for (int64_t p = 0; p < 8; ++p) device_bytes[static_cast<size_t>(p)] += g.box(p).num_elements() * 4;
  }
  for (int64_t b : device_bytes) max_device_bytes = std::max(max_device_bytes, b);
  out << fmt::format("   float32 model: {} bytes whole, at most {} bytes on any device ({:.1f}x less)\n",
                     total_bytes, max_device_bytes,
                     static_cast<double>(total_bytes) / static_cast<double>(max_device_bytes));

  out << "\n4. The grid of decoder_block_0/ffw_gating/kernel (64, 256):\n";
  ShardGeometry gating(*layout_map.get("decoder_block_0/ffw_gating/kernel"), {64, 256});
  out << render_layout_grid(gating);

  out << "\n5. An uneven split is allowed and shown: shape (10,) over 'model' (4):\n";
  ShardGeometry uneven(TensorLayout({"model"}, mesh), {10});
  out << render_layout_grid(uneven);

  out << "\n6. Why a path gets its layout (a second, overlapping rule makes it ambiguous):\n";
  LayoutMap overlapping = layout_map;
  overlapping[".*kernel"] = {"model", None};
  out << overlapping.explain("decoder_block_0/ffw_gating/kernel").to_string(overlapping);

  out << "\n7. Rules that match none of the model's paths (usually a typo or a renamed layer):\n";
  for (size_t i : layout_map.unused_rules(paths)) {
    out << fmt::format("   rule {} '{}' matches nothing\n", i, layout_map.rule(i).pattern);
  }
  return 0;
}

void add_demo_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "demo", "A tour of meshlayout on the default virtual mesh (2x4 over list_devices()).");
  cmd->callback([exit_code] { *exit_code = run_demo(std::cout); });
}

}  // namespace meshlayout::cli
