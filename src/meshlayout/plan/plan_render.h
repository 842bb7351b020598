// plan_render.h — the text and JSON forms of a CheckpointPlan (checkpoint_plan.h), as
// `meshlayout plan` prints them (plan_command.h describes both).
//
// Both build one string; texts that depend only on a placement or a rule (shapes, byte
// sizes, layouts) are formatted once, so 100,000 tensors render in well under a second.
//
// Example:
//   CheckpointPlan plan = plan_checkpoint(ckpt, map);
//   std::cout << render_plan_text(plan);
//   nlohmann::json j = nlohmann::json::parse(render_plan_json(plan));
#pragma once

#include <string>

#include "meshlayout/plan/checkpoint_plan.h"

namespace meshlayout {

/// One aligned line per tensor, the rules, a per-device table, then warnings and errors.
std::string render_plan_text(const CheckpointPlan& plan);

/// One JSON object (fields in plan_command.h), one tensor / device / issue per line, ending
/// with a newline.
std::string render_plan_json(const CheckpointPlan& plan);

}  // namespace meshlayout
