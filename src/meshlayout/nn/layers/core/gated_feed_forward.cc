// gated_feed_forward.cc — see gated_feed_forward.h.
#include "meshlayout/nn/layers/core/gated_feed_forward.h"

#include <fmt/format.h>

#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {
namespace {

GateFunction gate_function(GatedActivation activation) {
  return activation == GatedActivation::kSilu ? GateFunction::kSilu : GateFunction::kGeluTanh;
}

}  // namespace

Array gated_activation(GatedActivation activation, const Array& g, const Array& u) {
  return gated_unit(gate_function(activation), g, u);
}

SwigluGrads gated_activation_backward(GatedActivation activation, const Array& g, const Array& u,
                                      const Array& dy) {
  return gated_unit_backward(gate_function(activation), g, u, dy);
}

GatedFeedForward::GatedFeedForward(int64_t intermediate_dim, int64_t output_dim,
                                   GatedFeedForwardOptions options)
    : Layer("gated_feed_forward", options.name), options_(std::move(options)) {
  const auto dense = [&](const std::string& name, int64_t units) {
    return track(name, std::make_shared<Dense>(
                           units, DenseOptions{.name = name,
                                               .use_bias = false,
                                               .kernel_initializer = options_.kernel_initializer}));
  };
  gate_ = dense(options_.gate_name, intermediate_dim);
  up_ = dense(options_.up_name, intermediate_dim);
  down_ = dense(options_.down_name, output_dim);
}

Shape GatedFeedForward::compute_output_shape(const Shape& input_shape) const {
  Shape out = input_shape;
  out.back() = down_->units();
  return out;
}

void GatedFeedForward::build(const Shape& input_shape) {
  // Flat: a scope whose path is the enclosing layer's (this block's parent path), so the
  // projections record that parent.
  std::optional<NameScope> enclosing;
  if (options_.flat) {
    const std::string own = path();
    if (own == name()) {
      throw FailedPreconditionError(
          fmt::format("GatedFeedForward {} is flat: build it from an enclosing layer's build()",
                      quote(name())));
    }
    const std::string parent = own.substr(0, own.size() - name().size() - 1);
    const size_t slash = parent.rfind('/');
    enclosing.emplace(slash == std::string::npos ? parent : parent.substr(slash + 1), nullptr,
                      slash == std::string::npos ? std::string() : parent.substr(0, slash));
  }
  gate_->maybe_build(input_shape);
  up_->maybe_build(input_shape);
  Shape ff = input_shape;
  ff.back() = gate_->compute_output_shape(input_shape).back();
  down_->maybe_build(ff);
}

Array GatedFeedForward::forward(const Array& x, const Array* residual) {
  NameScope scope = open_name_scope();
  // act(x·W_gate)·(x·W_up) in one pass, as in forward_for_training.
  const Array ff = gated_activation(options_.activation, matmul(x, gate_->kernel()->value()),
                                    matmul(x, up_->kernel()->value()));
  return matmul(ff, down_->kernel()->value(), {.add_to_output = residual});
}

Array GatedFeedForward::forward_for_training(const Array& x, Saved& saved) {
  NameScope scope = open_name_scope();
  saved.gate.emplace(matmul(x, gate_->kernel()->value()));
  saved.up.emplace(matmul(x, up_->kernel()->value()));
  return matmul(gated_activation(options_.activation, *saved.gate, *saved.up),
                down_->kernel()->value());
}

Array GatedFeedForward::backward_saved(const Array& x, const Saved& saved, const Array& dy,
                                       Gradients& grads) {
  NameScope scope = open_name_scope();
  // y = ff · W_down, ff = act(z_gate) · z_up, z = x · W.
  const Array ff = gated_activation(options_.activation, *saved.gate, *saved.up);
  const Array& w_down = down_->kernel()->value();
  grads.accumulate(*down_->kernel(), matmul_backward_weight(ff, dy, w_down.layout()));
  const SwigluGrads dz = gated_activation_backward(options_.activation, *saved.gate, *saved.up,
                                                   matmul_backward_input(dy, w_down, ff.layout()));
  const Array& w_gate = gate_->kernel()->value();
  const Array& w_up = up_->kernel()->value();
  grads.accumulate(*gate_->kernel(), matmul_backward_weight(x, dz.dg, w_gate.layout()));
  grads.accumulate(*up_->kernel(), matmul_backward_weight(x, dz.du, w_up.layout()));
  return add(matmul_backward_input(dz.dg, w_gate, x.layout()),
             matmul_backward_input(dz.du, w_up, x.layout()));
}

Array GatedFeedForward::backward(const Array& x, const Array& dy, Gradients& grads) {
  Saved saved;
  forward_for_training(x, saved);
  return backward_saved(x, saved, dy, grads);
}

}  // namespace meshlayout
