// moe_replay.h — (internal to plan/) a mixture-of-experts feed-forward's allocations in the
// step replay (allocation_replay.h), mirroring nn/layers/moe/sparse_moe.cc and ops/moe.cc: the
// router's logits and its choice (ids, weights, probabilities: kept for the backward), the
// operands copied into the experts' compute layouts, one partial sum of the tokens per expert
// block (per token block of the kernels in the backward), and the outputs they are summed into.
// The experts' per-token intermediates are the kernels' host scratch (kernels/cpu/moe.cc), not
// device memory: the device bytes do not depend on the routing, except where the experts are
// split over the tokens' own mesh axes (the all-to-all dispatch): there each device is planned
// to receive every token of its group (the worst case), and MoeReplay::worst_case says so.
//
// Example (step_memory.cc):
//   const replay::MoeWeights w = replay::moe_weights(shapes, map, mesh, /*block=*/0);
//   replay::MoeSaved saved;
//   Sym y = replay::moe_forward(r, shapes, w, m, saved);
//   Sym dm = replay::moe_backward(r, shapes, w, m, saved, dy);
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/plan/allocation_replay.h"
#include "meshlayout/plan/memory_plan.h"

namespace meshlayout::replay {

/// A sparse block's kernels as the rules lay them out (no bytes: weights) and their paths.
struct MoeWeights {
  Sym router, gate, up, down;  // (d, E), (E, d, F), (E, d, F), (E, F, d)
  std::string router_path, gate_path, up_path, down_path;
  /// Tokens reach their experts by the all-to-all dispatch (planned for the worst case).
  bool dispatched = false;
};

/// The kernels of the sparse block of DecoderShapes::expert_blocks[index] (layer
/// shapes.expert_layers[index]).
MoeWeights moe_weights(const DecoderShapes& shapes, const LayoutMap& map, const DeviceMesh& mesh,
                       size_t index);

/// What the forward keeps for the backward: the router's choice.
struct MoeSaved {
  std::optional<Sym> ids, weights, probs;
};

/// SparseMoe::forward(m, &saved): the block's output (m's layout and shape).
Sym moe_forward(Replay& r, const DecoderShapes& shapes, const MoeWeights& w, const Sym& m,
                MoeSaved& saved);
/// SparseMoe::backward_saved: dL/dm; the four kernels' gradients go to r.gradient.
Sym moe_backward(Replay& r, const DecoderShapes& shapes, const MoeWeights& w, const Sym& m,
                 const MoeSaved& saved, const Sym& dy);

}  // namespace meshlayout::replay
