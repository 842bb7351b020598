#include "meshlayout/nn/prelu.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/nn/float_compute.h"
#include "meshlayout/nn/gradient_ops.h"

namespace meshlayout {
namespace {

// Calls f(k, a) for every element of `box` (row-major, k its index in the box) with a its flat
// index into alpha, whose strides over the input's dimensions are `alpha_strides` (0 for the
// batch and the shared axes).
template <typename F>
void for_each_with_alpha(const Box& box, const std::vector<int64_t>& alpha_strides, F&& f) {
  const size_t rank = box.shape.size();
  const int64_t n = box.num_elements();
  if (n == 0) return;
  std::vector<int64_t> index(rank, 0);
  int64_t a = 0;
  for (size_t d = 0; d < rank; ++d) a += box.offset[d] * alpha_strides[d];
  for (int64_t k = 0; k < n; ++k) {
    f(k, a);
    for (size_t d = rank; d-- > 0;) {  // the odometer, last dimension fastest
      if (++index[d] < box.shape[d]) {
        a += alpha_strides[d];
        break;
      }
      a -= (box.shape[d] - 1) * alpha_strides[d];
      index[d] = 0;
    }
  }
}

}  // namespace

PReLU::PReLU(PReLUOptions options) : Layer("p_re_lu", options.name), options_(std::move(options)) {}

void PReLU::build(const Shape& input_shape) {
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  if (rank < 2) {
    throw ValueError(
        fmt::format("PReLU layer {} takes inputs of rank >= 2 (batch, …), got shape {}",
                    quote(name()), shape_to_string(input_shape)));
  }
  Shape param(input_shape.begin() + 1, input_shape.end());
  for (int64_t a : options_.shared_axes) {
    if (a < 1 || a >= rank) {
      throw ValueError(
          fmt::format("PReLU layer {}: shared_axes [{}] must be input axes in [1, {}] (not the "
                      "batch axis 0) for inputs of shape {}; got {}",
                      quote(name()), fmt::join(options_.shared_axes, ", "), rank - 1,
                      shape_to_string(input_shape), a));
    }
    param[static_cast<size_t>(a - 1)] = 1;
  }
  built_shape_ = input_shape;
  alpha_ = add_weight({.name = "alpha",
                       .shape = param,
                       .initializer = options_.alpha_initializer,
                       .regularizer = options_.alpha_regularizer,
                       .layout = options_.alpha_layout});
  internal_nn::check_compute_dtype("PReLU", name(), alpha_->dtype());
}

void PReLU::check_input(const Array& x) const {
  const Shape& s = x.shape();
  bool ok = s.size() == built_shape_.size();
  for (size_t d = 1; ok && d < s.size(); ++d) {
    const bool shared = std::find(options_.shared_axes.begin(), options_.shared_axes.end(),
                                  static_cast<int64_t>(d)) != options_.shared_axes.end();
    ok = shared || s[d] == built_shape_[d];
  }
  if (!ok) {
    throw ValueError(
        fmt::format("PReLU layer {} was built for inputs of shape {} (any batch{}), got {}",
                    quote(name()), shape_to_string(built_shape_),
                    options_.shared_axes.empty() ? "" : " and any size on the shared axes",
                    shape_to_string(s)));
  }
  check_input_dtype("PReLU", name(), x.dtype(), alpha_->dtype());
}

Array PReLU::alpha_on(const Array& x) const {
  const Array& a = alpha_->value();
  return distribute_tensor(a,
                           TensorLayout::replicated(static_cast<int>(a.shape().size()), x.mesh()));
}

namespace {

std::vector<int64_t> alpha_strides(const Shape& input, const Shape& alpha) {
  std::vector<int64_t> strides(input.size(), 0);
  int64_t stride = 1;
  for (size_t d = input.size(); d-- > 1;) {
    strides[d] = alpha[d - 1] == 1 ? 0 : stride;  // a shared axis (size 1) reads one alpha
    stride *= alpha[d - 1];
  }
  return strides;
}

}  // namespace

Array PReLU::call(const Array& x) {
  check_input(x);
  const Array alpha = alpha_on(x);
  Array y = distribute_tensor(x, x.layout());
  const std::vector<int64_t> strides = alpha_strides(x.shape(), alpha_->shape());
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& s = y.local_shards()[i];
    internal_nn::dispatch_float(y.dtype(), [&]<typename E>(E* /*tag*/) {
      E* p = reinterpret_cast<E*>(s.buffer.data());
      const E* a = reinterpret_cast<const E*>(alpha.shard_at(s.position)->buffer.data());
      for_each_with_alpha(s.box, strides, [&](int64_t k, int64_t ai) {
        if (p[k] < E(0)) p[k] = a[ai] * p[k];
      });
    });
  });
  return y;
}

Array PReLU::backward(const Array& x, const Array& dy, Gradients& grads) {
  if (!alpha_) {
    throw FailedPreconditionError(
        fmt::format("PReLU layer {} is not built: call it before its backward", quote(name())));
  }
  check_input(x);
  check_output_gradient(name(), dy, x.shape(), x.dtype());
  const Array alpha = alpha_on(x);
  const std::vector<int64_t> strides = alpha_strides(x.shape(), alpha_->shape());
  Array dx = distribute_tensor(dy, x.layout());  // overwritten with dL/dx
  std::optional<Array> g;                        // dy · min(x, 0)
  if (alpha_->trainable()) g.emplace(distribute_tensor(dx, x.layout()));
  dx.runtime().pool().parallel_for(dx.local_shards().size(), [&](size_t i) {
    Array::Shard& s = dx.local_shards()[i];
    internal_nn::dispatch_float(dx.dtype(), [&]<typename E>(E* /*tag*/) {
      E* d = reinterpret_cast<E*>(s.buffer.data());
      E* gs = g ? reinterpret_cast<E*>(g->shard_at(s.position)->buffer.data()) : nullptr;
      const E* xv = reinterpret_cast<const E*>(x.shard_at(s.position)->buffer.data());
      const E* a = reinterpret_cast<const E*>(alpha.shard_at(s.position)->buffer.data());
      for_each_with_alpha(s.box, strides, [&](int64_t k, int64_t ai) {
        const bool negative = xv[k] < E(0);
        if (gs) gs[k] = negative ? gs[k] * xv[k] : E(0);
        if (!(xv[k] > E(0))) d[k] = negative ? d[k] * a[ai] : E(0);  // relu'(0) = 0, as autodiff
      });
    });
  });
  if (g) {
    // Σ over the batch (a partial sum over the batch split, completed by the collective) …
    const int trailing = static_cast<int>(x.shape().size()) - 1;
    const TensorLayout& alpha_layout = alpha_->value().layout();
    if (options_.shared_axes.empty() && alpha_->value().mesh() == x.mesh()) {
      grads.accumulate(*alpha_, sum_over_leading(*g, trailing, alpha_layout));
    } else {
      // … then over the shared axes, on each device's whole copy (the same on every device).
      const Shape sample(x.shape().begin() + 1, x.shape().end());
      const Array summed =
          sum_over_leading(*g, trailing, TensorLayout::replicated(trailing, x.mesh()));
      const Array::Shard& whole = summed.local_shards().front();
      std::vector<int64_t> to_alpha = alpha_strides(x.shape(), alpha_->shape());
      to_alpha.erase(to_alpha.begin());
      HostTensor da(x.dtype(), alpha_->shape());
      internal_nn::dispatch_float(x.dtype(), [&]<typename E>(E* /*tag*/) {
        std::vector<double> acc(static_cast<size_t>(num_elements(alpha_->shape())), 0.0);
        const E* v = reinterpret_cast<const E*>(whole.buffer.data());
        for_each_with_alpha(Box{Shape(sample.size(), 0), sample}, to_alpha,
                            [&](int64_t k, int64_t ai) { acc[static_cast<size_t>(ai)] += v[k]; });
        for (size_t k = 0; k < acc.size(); ++k) da.data_as<E>()[k] = static_cast<E>(acc[k]);
      });
      grads.accumulate(*alpha_, distribute_tensor(da, alpha_layout, {.runtime = x.runtime_ptr()}));
    }
  }
  return dx;
}

}  // namespace meshlayout
