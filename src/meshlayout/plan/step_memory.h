// step_memory.h — the activations of one decoder training step per device, by replaying the
// step's allocations on byte counters instead of running it: the same sequence of arrays the
// Llama's loss_and_gradients creates and frees (models/llama.cc: forward keeping each block's
// input, h and the feed-forward's gate and up; the top's logits and their gradient; each block's
// backward from the top recomputing its norms and attention), each array laid out as the ops
// lay it out (matmul_plan.h decides every product's reshards, partial sums and output layout;
// attention_kv_layout the keys' and values'). Its peak includes the gradients made by then.
//
// Example:
//   StepMemory s = replay_training_step(shapes, map, mesh, /*batch=*/8, /*seq=*/2048,
//                                       Recompute::kAttention);
//   s.peak[3];               // the most device 3 holds during the step, weights and slots aside
//   s.gradients_at_peak[3];  // the part of it that is gradients
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/plan/memory_plan.h"

namespace meshlayout {

struct StepMemory {
  std::vector<uint64_t> peak;               // by mesh position: activations + gradients
  std::vector<uint64_t> gradients_at_peak;  // the gradients live at that moment
  std::vector<uint64_t> largest_reshard;    // the largest single reshard's target shard
  std::string largest_reshard_text;         // "… to layout[…]" on the first device
  std::string peak_phase;                   // where device 0 peaks ("backward of block 1")
  /// Blocks of DecoderShapes::expert_layers replayed without their feed-forward (no hook).
  std::vector<int64_t> experts_left_out;
  /// A sparse block was planned for the worst case of routing (all-to-all dispatch).
  bool experts_worst_case = false;
};

/// Replays one training step of a decoder of `shapes` whose weights are laid out by `map` on
/// `mesh`, for `batch` rows of `seq` tokens (the batch split over the mesh's first axis, as
/// ModelParallel's data layout), the backward recomputing as `recompute` says.
StepMemory replay_training_step(const DecoderShapes& shapes, const LayoutMap& map,
                                const DeviceMesh& mesh, int64_t batch, int64_t seq,
                                Recompute recompute);

}  // namespace meshlayout
