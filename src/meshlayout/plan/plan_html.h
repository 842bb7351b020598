// plan_html.h — `meshlayout plan --html FILE`: a plan as one self-contained HTML page (inline
// CSS and SVG, one small inline script, no network, fonts or external files):
//   - the summary (source, mesh, totals) and everything the page aggregated, said in words;
//   - the plan's warnings and errors;
//   - a bar chart of each device's bytes by kind (weights, gradients, optimizer slots,
//     activations, key/value cache, reshard temporaries: memory_plan.h's DeviceMemoryPlan),
//     with each device's peak and the device memory when given. Devices with the same bytes
//     of every kind share one bar ("16,384 devices: cpu:0…cpu:16383"); at most `max_bars`
//     bars, the largest first when there are more;
//   - per distinct layout (tensors with the same rule, shape and element size share one), the
//     tensor cut into boxes and the mesh grid showing which box each device holds
//     (layout_svg.h: a colour per device, copies hatched, N-D tensors as a 2-D slice, large
//     meshes as heatmaps), with the tensors sharing it named compactly
//     ("126 tensors: transformer_layer_{0–125}/self_attention/query/kernel").
// Size: pictures are drawn for at most `max_pictures` layouts (the largest by bytes) and
// until the page reaches `max_page_bytes`; the others are listed in a table. A 405B-shaped
// Llama on 16,384 devices is about 1 MB (plan_html_test checks it stays under 20 MB).
//
// The inline script only sets `data-meshlayout-rendered="ok"` on <html> and counts the
// pictures, so a headless browser can tell the page ran (plan_html_chromium_test.py).
//
// Example:
//   CheckpointPlan plan = plan_checkpoint(ckpt, map);
//   TrainingPlan t = plan_training(plan, map, *make_optimizer("adam"));
//   std::string page = render_plan_html(plan, {.memory = memory_from_training(t)});
//   write_output_file("plan.html", page, "--html");          // output_file.h
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/plan/checkpoint_plan.h"
#include "meshlayout/plan/layout_svg.h"
#include "meshlayout/plan/memory_plan.h"
#include "meshlayout/plan/name_groups.h"
#include "meshlayout/plan/training_plan.h"

namespace meshlayout {

struct PlanHtmlOptions {
  /// Per device (by mesh position), the bytes by kind; empty: the plan's weights only
  /// (memory_from_plan). Kinds that are zero on every device are not drawn.
  std::vector<DeviceMemoryPlan> memory;
  /// Lines shown under the summary (e.g. "training with adam, ZeRO-1 over data=2").
  std::vector<std::string> notes;
  /// The device memory, drawn as a line on the bar chart.
  std::optional<uint64_t> device_memory;
  int64_t max_bars = 64;
  size_t max_pictures = 200;
  size_t max_page_bytes = size_t{16} << 20;
  size_t max_issues = 500;       // warnings and errors listed (each kind)
  size_t max_name_groups = 12;   // name groups listed per layout
  size_t max_table_rows = 2000;  // layouts listed without pictures
  LayoutDrawOptions draw;
};

/// The page. A placement whose layout cannot be drawn (a layout of the wrong rank) is listed
/// with the reason.
std::string render_plan_html(const CheckpointPlan& plan, const PlanHtmlOptions& options = {});

/// The plan's per-device bytes as weights only.
std::vector<DeviceMemoryPlan> memory_from_plan(const CheckpointPlan& plan);

/// A training plan's weights, gradients and slots per device.
std::vector<DeviceMemoryPlan> memory_from_training(const TrainingPlan& training);

}  // namespace meshlayout
