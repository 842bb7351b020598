// gated_feed_forward.cc — see gated_feed_forward.h.
#include "meshlayout/nn/layers/core/gated_feed_forward.h"

#include <fmt/format.h>

#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/geglu.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {
namespace {

void check_operand(const Array& g, const Array& x, std::string_view what) {
  if (x.shape() != g.shape() || x.dtype() != g.dtype() ||
      (g.dtype() != DType::kF32 && g.dtype() != DType::kF64)) {
    throw ValueError(
        fmt::format("geglu needs gate and {} of one shape and dtype (F32 or F64), got gate {} {} "
                    "and {} {} {}",
                    what, shape_to_string(g.shape()), dtype_name(g.dtype()), what,
                    shape_to_string(x.shape()), dtype_name(x.dtype())));
  }
}

// x in `layout` (a reference to x itself when it already is).
const Array& aligned(const Array& x, const TensorLayout& layout, std::optional<Array>& holder) {
  return x.layout() == layout ? x : holder.emplace(distribute_tensor(x, layout));
}

Array geglu(const Array& g, const Array& u) {
  check_operand(g, u, "up");
  std::optional<Array> hold_u;
  const Array& ua = aligned(u, g.layout(), hold_u);
  Array out = allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
    Array::Shard& o = out.local_shards()[i];
    geglu_forward(
        kind,
        {.y = &o, .g = g.shard_at(o.position), .u = ua.shard_at(o.position), .dtype = g.dtype()});
  });
  return out;
}

SwigluGrads geglu_grads(const Array& g, const Array& u, const Array& dy) {
  check_operand(g, u, "up");
  check_operand(g, dy, "output gradient");
  std::optional<Array> hold_u, hold_dy;
  const Array& ua = aligned(u, g.layout(), hold_u);
  const Array& dya = aligned(dy, g.layout(), hold_dy);
  SwigluGrads out{allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr()),
                  allocate_agreed(g.layout(), g.shape(), g.dtype(), g.runtime_ptr())};
  const DeviceKind kind = kind_of(out.dg);
  out.dg.runtime().pool().parallel_for(out.dg.local_shards().size(), [&](size_t i) {
    Array::Shard& dg = out.dg.local_shards()[i];
    geglu_backward(kind, {.dg = &dg,
                          .du = &out.du.local_shards()[i],
                          .g = g.shard_at(dg.position),
                          .u = ua.shard_at(dg.position),
                          .dy = dya.shard_at(dg.position),
                          .dtype = g.dtype()});
  });
  return out;
}

}  // namespace

Array gated_activation(GatedActivation activation, const Array& g, const Array& u) {
  return activation == GatedActivation::kSilu ? swiglu(g, u) : geglu(g, u);
}

SwigluGrads gated_activation_backward(GatedActivation activation, const Array& g, const Array& u,
                                      const Array& dy) {
  return activation == GatedActivation::kSilu ? swiglu_backward(g, u, dy) : geglu_grads(g, u, dy);
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
