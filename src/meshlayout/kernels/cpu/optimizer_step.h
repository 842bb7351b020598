// optimizer_step.h — what the CPU optimizer kernels share (internal to kernels/cpu): a shard's
// step prepared in the variable's element type T (the gradient cast and clipped, weight decay on
// θ), handed to an optimizer's per-element rule. Moved unchanged from train/optimizer.cc.
//
// Example (kernels/cpu/adam_update.cc):
//   void adam_update_cpu(const AdamUpdate& args) {
//     optimizer_cpu::update(args, [](const auto& s, const AdamParams& o) { adam_step(s, o); });
//   }
#pragma once

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "meshlayout/kernels/cpu/float_dispatch.h"
#include "meshlayout/kernels/optimizer.h"

namespace meshlayout::optimizer_cpu {

// The arguments of one local shard's update, in the variable's element type T.
template <typename T>
struct ShardStep {
  T* theta;                   // the variable's shard
  const T* grad;              // the (cast, clipped) gradient of that box
  int64_t n;                  // elements
  std::span<T* const> slots;  // this variable's slots of this shard, in slot_names() order
  T lr;                       // learning_rate cast to T
  int64_t iterations;         // before this step
};

// The gradient of one box in T: cast, then clipped (clipvalue elementwise, or scaled by
// `scale` for clipnorm/global_clipnorm: Keras' g·c / max(‖g‖, c) and g·scale).
template <typename T>
const T* prepared_gradient(const Array::Shard& g, DType dtype, int64_t n,
                           const std::optional<double>& clipvalue,
                           const std::optional<std::pair<double, double>>& norm_clip,
                           std::vector<T>& buffer) {
  const bool same = dtype == (sizeof(T) == 4 ? DType::kF32 : DType::kF64);
  if (same && !clipvalue && !norm_clip) return reinterpret_cast<const T*>(g.buffer.data());
  buffer.resize(static_cast<size_t>(n));
  if (dtype == DType::kF32) {
    const float* src = reinterpret_cast<const float*>(g.buffer.data());
    for (int64_t k = 0; k < n; ++k) buffer[k] = static_cast<T>(src[k]);
  } else {
    const double* src = reinterpret_cast<const double*>(g.buffer.data());
    for (int64_t k = 0; k < n; ++k) buffer[k] = static_cast<T>(src[k]);
  }
  if (clipvalue) {
    const T c = static_cast<T>(*clipvalue);
    for (T& x : buffer) x = std::clamp(x, -c, c);
  } else if (norm_clip) {
    // (multiplier, divisor): clipnorm → (c, max(norm, c)); global → (scale, 1).
    const T mul = static_cast<T>(norm_clip->first), div = static_cast<T>(norm_clip->second);
    for (T& x : buffer) x = x * mul / div;
  }
  return buffer.data();
}

// Prepares the step of `a` in T (the gradient cast and clipped, weight decay on θ) and calls
// f with it; `buffer` holds the prepared gradient when it is not the gradient's own bytes.
template <typename T, typename F>
void with_shard_step(const OptimizerShardStep& a, std::vector<T>& buffer, F&& f) {
  Array::Shard& x = *a.theta;
  const int64_t n = x.box.num_elements();
  const T* grad = prepared_gradient<T>(*a.grad, a.grad_dtype, n, a.clipvalue, a.norm_clip, buffer);
  T* theta = reinterpret_cast<T*>(x.buffer.data());
  const T lr_t = static_cast<T>(a.lr);
  if (a.weight_decay) {
    const T wd = static_cast<T>(*a.weight_decay);
    for (int64_t k = 0; k < n; ++k) theta[k] = theta[k] - theta[k] * wd * lr_t;
  }
  std::vector<T*> slot_ptrs;
  for (Array::Shard* s : a.slots) slot_ptrs.push_back(reinterpret_cast<T*>(s->buffer.data()));
  f(ShardStep<T>{theta, grad, n, slot_ptrs, lr_t, a.iterations});
}

// One optimizer's update of a shard: the step prepared in the variable's type, then rule<T>.
template <typename Params, typename Rule>
void update(const OptimizerUpdate<Params>& args, Rule&& rule) {
  cpu_kernels::dispatch_float(args.step.dtype, [&]<typename T>(T* /*tag*/) {
    std::vector<T> buffer;
    with_shard_step<T>(args.step, buffer, [&](const ShardStep<T>& s) { rule(s, args.params); });
  });
}

}  // namespace meshlayout::optimizer_cpu
