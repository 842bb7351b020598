// checkpoint_plan.h — where every tensor of a checkpoint would go on a target mesh, from the
// safetensors header(s) alone: the reusable part of `meshlayout plan` (and of the demo).
//
// For each tensor: the LayoutMap rule that decides it (see layout_map.h), its layout, the
// largest shard a device holds (shape and bytes, by ShardGeometry's one tiling rule) and
// whether the split is uneven; per mesh device, the bytes it would hold; and the issues:
//   error    ambiguous path (several rules hit in search/fullmatch mode), a layout whose rank
//            differs from the tensor's, a rule whose layout is on another mesh, and (strict)
//            an uneven split. A tensor with an error is left out of the per-device totals.
//   warning  an uneven split (naming the dimension, its size and the axis size), a tensor of
//            at least `replicated_warn_bytes` that no rule matches (so every device holds all
//            of it), a rule that matches no tensor (LayoutMap::unused_rules).
// Nothing fails the whole plan except a map without a mesh (ValueError).
//
// Tensors with the same rule, shape and element size share one Placement, so the geometry is
// computed once per distinct shape (a transformer has a few dozen), and the per-device totals
// cost O(placements × devices), not O(tensors × devices).
//
// Example:
//   Checkpoint ckpt = Checkpoint::open("model.safetensors");
//   CheckpointPlan plan = plan_checkpoint(ckpt, rules.to_layout_map(), {.strict = false});
//   std::cout << render_plan_text(plan);        // or render_plan_json(plan) (plan_render.h)
//   plan.device_bytes[3];                        // bytes the device at position 3 would hold
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/core/shape.h"
#include "meshlayout/io/safetensors_header.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout_map/layout_map.h"

namespace meshlayout {
class Checkpoint;
}

namespace meshlayout {

/// Default of PlanOptions::replicated_warn_bytes (and `plan --replicated-warn-bytes`): 16 MiB,
/// a 2048 x 4096 bf16 matrix. Norm scales and biases stay far below it; a projection or an
/// embedding matrix that no rule matches is far above it.
inline constexpr uint64_t kDefaultReplicatedWarnBytes = uint64_t{16} << 20;

struct PlanOptions {
  /// Uneven splits are errors instead of warnings.
  bool strict = false;
  /// Warn about tensors of at least this many bytes that no rule matches (0: never warn).
  /// Not checked on a one-device mesh, where replicated is the only layout.
  uint64_t replicated_warn_bytes = kDefaultReplicatedWarnBytes;
};

/// What a layout does to a tensor shape; shared by every tensor with the same rule, shape and
/// element size.
struct Placement {
  std::optional<size_t> rule;  // std::nullopt: no rule matched, the tensor is replicated
  Shape shape;
  size_t element_size = 0;
  bool fits = true;          // false: the layout's rank differs from the tensor's
  Shape shard_shape;         // the largest shard (every dimension's first block)
  uint64_t shard_bytes = 0;  // bytes of the largest shard
  int64_t num_replicas = 1;  // full copies across the mesh
  std::vector<UnevenDim> uneven;
};

struct PlannedTensor {
  const TensorInfo* info = nullptr;
  const std::string* file = nullptr;  // the file holding it (nullptr when planned from headers)
  std::optional<size_t> placement;    // index into CheckpointPlan::placements
  std::string error;                  // why the tensor cannot be placed; empty if it can
  bool large_replicated = false;      // no rule, at least PlanOptions::replicated_warn_bytes

  bool ok() const { return error.empty(); }
};

struct PlanIssue {
  enum class Severity { kWarning, kError };
  /// kModelSplit: a split the model's forward cannot honour exactly, and what it does instead
  /// (added by the model's own checks, e.g. models/llama_split_notes.h, not by plan_tensors).
  enum class Kind {
    kAmbiguous,
    kRankMismatch,
    kOtherMesh,
    kUneven,
    kLargeReplicated,
    kUnusedRule,
    kModelSplit
  };
  Severity severity = Severity::kWarning;
  Kind kind = Kind::kUneven;
  std::optional<size_t> tensor;  // index into CheckpointPlan::tensors
  std::optional<size_t> rule;    // index into CheckpointPlan::rules
  std::string message;
};

/// "ambiguous", "rank_mismatch", "other_mesh", "uneven", "large_replicated", "unused_rule".
std::string_view plan_issue_kind_name(PlanIssue::Kind kind);

struct PlannedRule {
  std::string pattern;
  std::string layout_text;  // `layout[None,model]` (no mesh)
  std::string layout_json;  // `[null,"model"]`
  size_t tensors = 0;       // tensors it decides
};

struct CheckpointPlan {
  std::string source;  // what was planned: the checkpoint path, or empty
  size_t num_files = 0;
  DeviceMesh mesh;
  MatchMode mode = MatchMode::kSearch;
  PlanOptions options;
  std::vector<PlannedRule> rules;
  std::vector<Placement> placements;
  std::vector<PlannedTensor> tensors;  // in the order given (checkpoint: file then data order)
  /// Bytes each device would hold, by mesh position (tensors with errors left out).
  std::vector<uint64_t> device_bytes;
  std::vector<PlanIssue> issues;  // per tensor in tensor order, then unused rules

  uint64_t total_bytes = 0;   // sum of every tensor's bytes
  size_t num_sharded = 0;     // tensors without error that a rule splits over some axis
  size_t num_replicated = 0;  // tensors without error held whole by every device
  size_t num_errors = 0;      // issues of severity error
  size_t num_warnings = 0;

  bool ok() const { return num_errors == 0; }
  /// Appends an issue found outside plan_tensors (e.g. a model's kModelSplit notes), counting it.
  void add_issue(PlanIssue issue) {
    (issue.severity == PlanIssue::Severity::kError ? num_errors : num_warnings)++;
    issues.push_back(std::move(issue));
  }
};

/// Plans `tensors` (which must outlive the plan) on the map's mesh. ValueError if the map
/// has no mesh.
CheckpointPlan plan_tensors(std::span<const TensorInfo* const> tensors, const LayoutMap& map,
                            const PlanOptions& options = {});

/// Plans every tensor of `checkpoint` (which must outlive the plan), in its order.
CheckpointPlan plan_checkpoint(const Checkpoint& checkpoint, const LayoutMap& map,
                               const PlanOptions& options = {}, std::string source = "");

}  // namespace meshlayout
