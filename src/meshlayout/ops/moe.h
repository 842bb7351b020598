// moe.h — a mixture of experts on distributed arrays: the router's top-k choice and the experts'
// weighted sum (Hugging Face's Mixtral / Qwen-MoE sparse block), forward and backward, with
// expert parallelism.
//
// Layouts. Tokens x (…, d) may be split on their leading dimensions (data parallelism); the
// stacked kernels gate and up (E, d, F) and down (E, F, d) may split the experts E over mesh
// axes (expert parallelism) and F over others (tensor parallelism inside the experts). d is
// made whole where it is split (kernels: gathered per call, as FSDP does). Every device then
// runs its block of experts × F columns on the tokens of its row block routed to them
// (kernels/moe.h: only routed tokens are computed), and the blocks' outputs are partial sums
// completed into x's layout (ops/partial_sum.h, NOTE [Partial sums]):
//   - experts and tokens on different axes: each device's tokens are already where its experts
//     are, and the combine is an all-reduce over the expert axes;
//   - tokens split over the expert axes themselves: by default (MoeDispatch::kAllToAll) each
//     token goes only to the devices holding its top-k experts and their outputs come back to
//     it (ops/moe_dispatch.h, NOTE [All-to-all dispatch]: per pair of processes one message
//     each way, rows computed on both sides from the routing ids); MoeDispatch::kAllGather
//     instead gathers the group's tokens on every device of the group and reduce-scatters the
//     sums back (Megatron's all-gather token dispatcher: (G − 1) × a device's tokens move
//     each way against at most top_k × (G − 1) / G for the all-to-all);
//   - experts replicated: the dense-equivalent path, every device all experts, no reduction
//     beyond a copy.
// With at most two experts a token whose experts share a block, the sums are bit-identical to
// the replicated path (a + b then zeros); split F sums its blocks in mesh order.
//
// Example:
//   Array logits = matmul(x, router_kernel);                       // (…, E)
//   ExpertRouting r = route_experts(logits, /*top_k=*/2, /*normalize=*/true);
//   Array y = expert_mixture(x, r.ids, r.weights, gate, up, down, GateFunction::kSilu);
//   ExpertMixtureGrads g = expert_mixture_backward(x, r.ids, r.weights, gate, up, down, dy,
//                                                  GateFunction::kSilu);
//   Array dlogits = route_experts_backward(r, g.dweights, /*normalize=*/true);
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/gated_activation.h"

namespace meshlayout {

/// How tokens reach experts split over the tokens' own mesh axes (see the file comment).
enum class MoeDispatch { kAllToAll, kAllGather };

/// The layout the mixture computes rows in: `layout`'s leading dimensions without the mesh axes
/// in `drop` (the experts' and F's, whose tokens are gathered), the last dimension whole. The
/// memory plan (plan/moe_replay.cc) replays the op with it.
TensorLayout moe_rows_layout(const TensorLayout& layout, const std::set<std::string>& drop);

/// The router's choice (kernels/moe.h "Routing") for logits (…, E): ids (…, top_k) I32 and
/// weights (…, top_k), probs (…, E) the softmax; all in logits' leading layout with the last
/// dimension whole.
struct ExpertRouting {
  Array ids, weights, probs;
};

/// ValueError unless logits is F32/F64 of rank ≥ 2 and 1 ≤ top_k ≤ E. Collective when logits'
/// last dimension is split.
ExpertRouting route_experts(const Array& logits, int64_t top_k, bool normalize);

/// dL/dlogits in the routing's layout given dL/dweights (any layout of weights' shape), plus
/// probs_grad[e] added to dL/dp[r, e] for every row when given (the auxiliary loss). Collective
/// when dweights' layout differs.
Array route_experts_backward(const ExpertRouting& routing, const Array& dweights, bool normalize,
                             const std::vector<double>* probs_grad = nullptr);

/// The auxiliary load-balancing loss's statistics over every token (each counted once, whatever
/// the layout): counts[e] = how many (token, slot) chose e, prob_sums[e] = Σ_tokens p[token, e],
/// tokens = the number of tokens. The same on every process. Collective.
struct ExpertStatistics {
  std::vector<double> counts, prob_sums;
  int64_t tokens = 0;
};
ExpertStatistics expert_statistics(const ExpertRouting& routing);

/// y = Σ_slots weights · (act(x · gate_e) ⊙ (x · up_e)) · down_e in x's layout (see the file
/// comment). ValueError naming the operand unless: x (…, d) and the kernels F32/F64 of x's dtype,
/// gate/up (E, d, F), down (E, F, d), ids/weights of x's leading shape plus top_k, ids I32 and
/// weights of x's dtype, all on x's mesh, and gate/up split alike with down's split matching.
/// Collective.
Array expert_mixture(const Array& x, const Array& ids, const Array& weights, const Array& gate,
                     const Array& up, const Array& down, GateFunction function,
                     MoeDispatch dispatch = MoeDispatch::kAllToAll);

struct ExpertMixtureGrads {
  Array dx;                 // x's layout
  Array dweights;           // weights' layout
  Array dgate, dup, ddown;  // the kernels' layouts
};
/// The gradients of expert_mixture given dy (x's shape, any layout). Collective.
ExpertMixtureGrads expert_mixture_backward(const Array& x, const Array& ids, const Array& weights,
                                           const Array& gate, const Array& up, const Array& down,
                                           const Array& dy, GateFunction function,
                                           MoeDispatch dispatch = MoeDispatch::kAllToAll);

}  // namespace meshlayout
