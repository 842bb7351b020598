// sparse_moe.cc — see sparse_moe.h.
#include "meshlayout/nn/layers/moe/sparse_moe.h"

#include <fmt/format.h>

#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/gradients.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"
#include "meshlayout/ops/sigmoid_gate.h"

namespace meshlayout {
namespace {

GateFunction gate_function(GatedActivation activation) {
  return activation == GatedActivation::kSilu ? GateFunction::kSilu : GateFunction::kGeluTanh;
}

}  // namespace

MoeExperts::MoeExperts(int64_t num_experts, int64_t intermediate_dim, Initializer initializer)
    : Layer("moe_experts", "experts"),
      num_experts_(num_experts),
      intermediate_dim_(intermediate_dim),
      initializer_(std::move(initializer)) {}

void MoeExperts::build(const Shape& input_shape) {
  const int64_t d = input_shape.back();
  const auto weight = [&](const char* name, Shape shape) {
    return add_weight({.name = name, .shape = std::move(shape), .initializer = initializer_});
  };
  gate_ = weight("expert_feedforward_gate_dense", {num_experts_, d, intermediate_dim_});
  up_ = weight("expert_feedforward_intermediate_dense", {num_experts_, d, intermediate_dim_});
  down_ = weight("expert_feedforward_output_dense", {num_experts_, intermediate_dim_, d});
}

Array MoeExperts::call(const Array&) {
  throw FailedPreconditionError(fmt::format(
      "{} holds the experts' kernels of a SparseMoe block; call the block, not the experts",
      quote(name())));
}

SparseMoe::SparseMoe(SparseMoeOptions options)
    : Layer("sparse_moe", options.name), options_(std::move(options)) {
  const SparseMoeOptions& o = options_;
  if (o.num_experts < 1 || o.top_k < 1 || o.top_k > o.num_experts || o.intermediate_dim < 1 ||
      o.shared_intermediate_dim < 0 || (o.shared_intermediate_dim > 0 && o.hidden_dim < 1)) {
    throw ValueError(fmt::format(
        "SparseMoe {}: num_experts ({}) and intermediate_dim ({}) must be at least 1, top_k "
        "({}) between 1 and num_experts, shared_intermediate_dim ({}) at least 0 and, with a "
        "shared expert, hidden_dim ({}) at least 1",
        quote(name()), o.num_experts, o.intermediate_dim, o.top_k, o.shared_intermediate_dim,
        o.hidden_dim));
  }
  router_ = track("sparse_feedforward_gate_dense",
                  std::make_shared<Dense>(
                      o.num_experts, DenseOptions{.name = "sparse_feedforward_gate_dense",
                                                  .use_bias = false,
                                                  .kernel_initializer = o.kernel_initializer}));
  experts_ = track("expert_bank", std::make_shared<MoeExperts>(o.num_experts, o.intermediate_dim,
                                                               o.kernel_initializer));
  if (o.shared_intermediate_dim > 0) {  // keras-hub's QwenSparseMoeBlock's names
    shared_ = track("shared_expert_dense",
                    std::make_shared<GatedFeedForward>(
                        o.shared_intermediate_dim, o.hidden_dim,
                        GatedFeedForwardOptions{.name = "shared_expert_dense",
                                                .activation = o.activation,
                                                .gate_name = "feedforward_gate_dense",
                                                .up_name = "feedforward_intermediate_dense",
                                                .down_name = "feedforward_output_dense",
                                                .kernel_initializer = o.kernel_initializer}));
    shared_gate_ =
        track("shared_expert_gate_dense",
              std::make_shared<Dense>(1, DenseOptions{.name = "shared_expert_gate_dense",
                                                      .use_bias = false,
                                                      .kernel_initializer = o.kernel_initializer}));
  }
}

void SparseMoe::build(const Shape& input_shape) {
  router_->maybe_build(input_shape);
  experts_->maybe_build(input_shape);
  if (shared_) {
    shared_->maybe_build(input_shape);
    shared_gate_->maybe_build(input_shape);
  }
}

Array SparseMoe::forward(const Array& x, Saved* saved) {
  NameScope scope = open_name_scope();
  ExpertRouting routing = route_experts(matmul(x, router_->kernel()->value()), options_.top_k,
                                        options_.normalize_top_k);
  Array y = expert_mixture(x, routing.ids, routing.weights, experts_->gate()->value(),
                           experts_->up()->value(), experts_->down()->value(),
                           gate_function(options_.activation));
  if (saved) saved->routing.emplace(std::move(routing));
  if (!shared_) return y;
  // y += sigmoid(x · w_sg) ⊙ shared(x)
  Array gate = matmul(x, shared_gate_->kernel()->value());
  Array out = saved ? shared_->forward_for_training(x, saved->shared) : shared_->forward(x);
  y = add(std::move(y), sigmoid_gate(gate, out));
  if (saved) {
    saved->shared_gate.emplace(std::move(gate));
    saved->shared_out.emplace(std::move(out));
  }
  return y;
}

Array SparseMoe::backward_saved(const Array& x, const Saved& saved, const Array& dy,
                                Gradients& grads, const std::vector<double>* probs_grad) {
  NameScope scope = open_name_scope();
  if (!saved.routing) {
    throw FailedPreconditionError(fmt::format(
        "SparseMoe {}: backward_saved needs the forward's saved routing", quote(name())));
  }
  const ExpertRouting& r = *saved.routing;
  ExpertMixtureGrads g = expert_mixture_backward(x, r.ids, r.weights, experts_->gate()->value(),
                                                 experts_->up()->value(), experts_->down()->value(),
                                                 dy, gate_function(options_.activation));
  grads.accumulate(*experts_->gate(), std::move(g.dgate));
  grads.accumulate(*experts_->up(), std::move(g.dup));
  grads.accumulate(*experts_->down(), std::move(g.ddown));
  const Array dlogits = route_experts_backward(r, g.dweights, options_.normalize_top_k, probs_grad);
  const Array& w = router_->kernel()->value();
  grads.accumulate(*router_->kernel(), matmul_backward_weight(x, dlogits, w.layout()));
  Array dx = add(g.dx, matmul_backward_input(dlogits, w, x.layout()));
  if (!shared_) return dx;
  if (!saved.shared_gate || !saved.shared_out) {
    throw FailedPreconditionError(fmt::format(
        "SparseMoe {}: backward_saved needs the forward's saved shared expert", quote(name())));
  }
  const SigmoidGateGrads sg = sigmoid_gate_backward(*saved.shared_gate, *saved.shared_out, dy);
  const Array dx_shared = shared_->backward_saved(x, saved.shared, sg.ds, grads);
  const Array& wg = shared_gate_->kernel()->value();
  grads.accumulate(*shared_gate_->kernel(), matmul_backward_weight(x, sg.dg, wg.layout()));
  return add(add(std::move(dx), dx_shared), matmul_backward_input(sg.dg, wg, x.layout()));
}

Array SparseMoe::backward(const Array& x, const Array& dy, Gradients& grads) {
  Saved saved;
  forward(x, &saved);
  return backward_saved(x, saved, dy, grads);
}

}  // namespace meshlayout
