// sparse_moe.h — a sparse mixture-of-experts feed-forward block (keras-hub's
// MixtralSparseMoeBlock / Qwen3SparseMoeBlock, Hugging Face's MixtralSparseMoeBlock) and its
// backward:
//
//   logits = x · W_router (…, E);  (ids, w) = top_k(softmax(logits)), w renormalised or not
//   y = Σ_slots w · (act(x · gate_e) ⊙ (x · up_e)) · down_e
//   with a shared expert (Qwen 2 MoE, keras-hub's QwenSparseMoeBlock):
//   y += sigmoid(x · w_sg) ⊙ shared(x), shared a SwiGLU of shared_intermediate_dim
//
// Variables (keras-hub's paths under the block's name): sparse_feedforward_gate_dense/kernel
// (d, E), and under "experts" the stacked expert_feedforward_gate_dense (E, d, F),
// expert_feedforward_intermediate_dense (E, d, F), expert_feedforward_output_dense (E, F, d).
// Split the experts dimension over a mesh axis for expert parallelism, F for tensor
// parallelism inside the experts (ops/moe.h says how each is computed).
//
// Training: forward(x, &saved) keeps the router's choice; backward_saved takes dL/dy and, for
// the auxiliary load-balancing loss, the constant term it adds to dL/dp of every token
// (ops/moe.h route_experts_backward's probs_grad).
//
// Example:
//   auto moe = std::make_shared<SparseMoe>(SparseMoeOptions{
//       .name = "mixtral_sparse_moe_block", .num_experts = 8, .top_k = 2,
//       .intermediate_dim = 64});                   // Qwen 2 MoE: .shared_intermediate_dim
//                                                   // = 96, .hidden_dim = 32
//   Array y = moe->call_on(x);                        // x (batch, seq, d) → (batch, seq, d)
//   SparseMoe::Saved saved;
//   Array y2 = moe->forward(x, &saved);
//   Array dx = moe->backward_saved(x, saved, dy, grads);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/nn/layer.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/core/gated_feed_forward.h"
#include "meshlayout/ops/moe.h"

namespace meshlayout {

struct SparseMoeOptions {
  std::string name;  // automatic ("sparse_moe", …) when empty
  int64_t num_experts = 0;
  int64_t top_k = 2;
  int64_t intermediate_dim = 0;  // F, each expert's hidden size
  /// Divide the chosen weights by their sum (Mixtral; Qwen's norm_topk_prob).
  bool normalize_top_k = true;
  GatedActivation activation = GatedActivation::kSilu;
  /// The shared expert's hidden size (Qwen 2 MoE's shared_expert_intermediate_size); 0: none.
  int64_t shared_intermediate_dim = 0;
  /// d, the block's input and output size: the shared expert's down projection's units.
  int64_t hidden_dim = 0;
  Initializer kernel_initializer = Initializer::glorot_uniform();
};

/// The stacked experts' kernels (keras-hub's MixtralMoeExperts, named "experts"): built from the
/// block's input shape; computed by SparseMoe (no call of its own).
class MoeExperts : public Layer {
 public:
  MoeExperts(int64_t num_experts, int64_t intermediate_dim, Initializer initializer);
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }
  const VariablePtr& gate() const { return gate_; }
  const VariablePtr& up() const { return up_; }
  const VariablePtr& down() const { return down_; }

 protected:
  void build(const Shape& input_shape) override;
  /// FailedPreconditionError: the experts run inside their SparseMoe block.
  Array call(const Array& x) override;

 private:
  int64_t num_experts_, intermediate_dim_;
  Initializer initializer_;
  VariablePtr gate_, up_, down_;
};

class SparseMoe : public Layer {
 public:
  /// ValueError naming the option unless num_experts ≥ 1, 1 ≤ top_k ≤ num_experts,
  /// intermediate_dim ≥ 1, shared_intermediate_dim ≥ 0 and, with a shared expert,
  /// hidden_dim ≥ 1.
  explicit SparseMoe(SparseMoeOptions options);
  const SparseMoeOptions& options() const { return options_; }
  const std::shared_ptr<Dense>& router() const { return router_; }
  const std::shared_ptr<MoeExperts>& experts() const { return experts_; }
  /// The shared expert and its gate (null without one).
  const std::shared_ptr<GatedFeedForward>& shared_expert() const { return shared_; }
  const std::shared_ptr<Dense>& shared_expert_gate() const { return shared_gate_; }
  Shape compute_output_shape(const Shape& input_shape) const override { return input_shape; }

  /// What backward_saved needs from the forward: the router's choice, and the shared expert's
  /// gate logits (…, 1), output and projections.
  struct Saved {
    std::optional<ExpertRouting> routing;
    std::optional<Array> shared_gate, shared_out;
    GatedFeedForward::Saved shared;
  };
  /// The block on x (…, d), keeping the router's choice in `saved` when given. Collective.
  Array forward(const Array& x, Saved* saved = nullptr);
  /// dL/dx in x's layout given the forward's `saved` and dy; accumulates the router's and the
  /// experts' gradients. probs_grad (E values, or null) is added to dL/dp of every token (the
  /// auxiliary loss). Collective.
  Array backward_saved(const Array& x, const Saved& saved, const Array& dy, Gradients& grads,
                       const std::vector<double>* probs_grad = nullptr);
  /// Layer::backward: forward then backward_saved, without the auxiliary loss.
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override;
  Array call(const Array& x) override { return forward(x); }

 private:
  SparseMoeOptions options_;
  std::shared_ptr<Dense> router_;
  std::shared_ptr<MoeExperts> experts_;
  std::shared_ptr<GatedFeedForward> shared_;
  std::shared_ptr<Dense> shared_gate_;
};

}  // namespace meshlayout
