// `meshlayout plan --html` at scale (issue 28 item 5): the page of a 405B-shaped Llama on
// 16,384 devices, against the text plan of the same plan in the same run.
//
//   build/bench/plan_html_bench [--mesh batch=128,model=128] [--reps R] [--out FILE]
//
// Workload: Llama 3.1 405B's shapes (126 layers, hidden 16384, 128 heads, 8 KV heads, head_dim
// 128, feed-forward 53248, vocabulary 128256; 1,136 tensors, BF16) planned from shapes alone
// (hf_llama_weight_mappings: nothing is allocated) under keras-hub's Llama rules
// (llama_layout_map, model and batch axes) on the mesh, with Adam's training footprint
// (weights, gradients, slots per device) for the bar chart.
//
// Measured, median of R runs (default 5):
//   plan_tensors, plan_training, plan_memory (batch 256 x seq 4096, Adam, a 4096-position
//                 cache: what `plan --html --batch --seq --cache-length` adds) for reference
//   baseline      render_plan_text (the text `plan` prints)
//   render_html   render_plan_html (pictures, heatmaps, bars)
//   write_html    write_output_file of the page (temporary file, fdatasync, rename)
// and the page's size. The targets: under 5 s and under 20 MB (plan_html_test checks the size;
// no test asserts a time). Prints `name value unit` lines.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/plan/memory_plan.h"
#include "meshlayout/plan/output_file.h"
#include "meshlayout/plan/plan_html.h"
#include "meshlayout/plan/plan_render.h"
#include "meshlayout/train/optimizer.h"

using namespace meshlayout;

namespace {

double median_seconds(int reps, const std::function<void()>& run) {
  return bench::median_seconds(
      reps, [] {}, run);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh_text = "batch=128,model=128";
  int reps = 5;
  std::string out =
      (std::filesystem::temp_directory_path() / "meshlayout_plan_html_bench.html").string();
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mesh" && i + 1 < argc) {
      mesh_text = argv[++i];
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = static_cast<int>(parse_int64(argv[++i], "--reps"));
    } else if (arg == "--out" && i + 1 < argc) {
      out = argv[++i];
      keep = true;
    } else {
      std::fprintf(stderr,
                   "usage: plan_html_bench [--mesh batch=128,model=128] [--reps R] [--out FILE]\n");
      return 2;
    }
  }
  try {
    set_device_count(kMaxMeshDevices);
    LlamaConfig config;
    config.vocab_size = 128256;
    config.hidden_size = 16384;
    config.intermediate_size = 53248;
    config.num_hidden_layers = 126;
    config.num_attention_heads = 128;
    config.num_key_value_heads = 8;
    config.head_dim = 128;
    std::vector<TensorInfo> infos;
    for (const HfWeightMapping& m : hf_llama_weight_mappings(config)) {
      TensorInfo t;
      t.name = m.keras_path;
      t.dtype_name = "BF16";
      t.dtype = DType::kBF16;
      t.element_size = 2;
      t.shape = m.keras_shape;
      t.end = static_cast<uint64_t>(num_elements(t.shape)) * 2;
      infos.push_back(std::move(t));
    }
    std::vector<const TensorInfo*> pointers;
    for (const TensorInfo& t : infos) pointers.push_back(&t);
    const DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
    const LayoutMap map = llama_layout_map(mesh, "model", "batch");

    const double plan_s = median_seconds(reps, [&] { (void)plan_tensors(pointers, map); });
    const CheckpointPlan plan = plan_tensors(pointers, map);
    std::unique_ptr<Optimizer> adam = make_optimizer("adam");
    PlanHtmlOptions options;
    const double training_s = median_seconds(
        reps, [&] { options.memory = memory_from_training(plan_training(plan, map, *adam)); });
    PlanHtmlOptions with_memory;
    const double memory_s = median_seconds(reps, [&] {
      with_memory.memory = plan_memory(plan, map,
                                       {.optimizer = adam.get(),
                                        .batch = 256,
                                        .seq = 4096,
                                        .cache_length = 4096,
                                        .shapes = decoder_shapes(config)})
                               .devices;
    });
    std::string text, page;
    const double text_s = median_seconds(reps, [&] { text = render_plan_text(plan); });
    const double html_s = median_seconds(reps, [&] { page = render_plan_html(plan, options); });
    const double write_s = median_seconds(reps, [&] { write_output_file(out, page, "--out"); });
    const double memory_html_s =
        median_seconds(reps, [&] { (void)render_plan_html(plan, with_memory); });
    if (!keep) std::filesystem::remove(out);

    fmt::print("workload {}-layer 405B-shaped Llama, {} tensors, on {} ({} devices)\n",
               config.num_hidden_layers, infos.size(), mesh.to_string(), mesh.size());
    fmt::print("plan_tensors {:.4f} s\n", plan_s);
    fmt::print("plan_training {:.4f} s\n", training_s);
    fmt::print("plan_memory {:.4f} s\n", memory_s);
    fmt::print("baseline_render_text {:.4f} s\n", text_s);
    fmt::print("render_html {:.4f} s\n", html_s);
    fmt::print("write_html {:.4f} s\n", write_s);
    fmt::print("render_html_with_memory {:.4f} s\n", memory_html_s);
    // What `plan --html --optimizer adam [--batch … --seq … --cache-length …]` spends on
    // the page's content and the page (reading a checkpoint's headers aside).
    fmt::print("end_to_end_training {:.4f} s\n", plan_s + training_s + html_s + write_s);
    fmt::print("end_to_end_memory {:.4f} s\n", plan_s + memory_s + memory_html_s + write_s);
    fmt::print("html_vs_text {:.2f} x\n", html_s / text_s);
    fmt::print("page_bytes {} bytes\n", page.size());
    fmt::print("page_under_20MB {}\n", page.size() < (size_t{20} << 20) ? "yes" : "NO");
    fmt::print(
        "written_under_5s {}\n",
        std::max(plan_s + training_s + html_s, plan_s + memory_s + memory_html_s) + write_s < 5.0
            ? "yes"
            : "NO");
    if (keep) fmt::print("page {}\n", out);
  } catch (const Error& e) {
    std::fprintf(stderr, "plan_html_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
