// cpu/optimizer.cc — the CPU implementation of kernels/optimizer.h: the preparation of a
// shard's step and each optimizer's per-element rule, moved unchanged from train/.
#include "meshlayout/kernels/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

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

template <typename T>
void sgd_step(const ShardStep<T>& s, double momentum, bool nesterov) {
  if (s.slots.empty()) {
    for (int64_t k = 0; k < s.n; ++k) s.theta[k] -= s.grad[k] * s.lr;
    return;
  }
  const T mu = static_cast<T>(momentum);
  T* m = s.slots[0];
  for (int64_t k = 0; k < s.n; ++k) {
    m[k] = m[k] * mu - s.grad[k] * s.lr;
    s.theta[k] += nesterov ? m[k] * mu - s.grad[k] * s.lr : m[k];
  }
}

template <typename T>
void adam_step(const ShardStep<T>& s, const AdamParams& o) {
  const T t = static_cast<T>(s.iterations + 1);
  const T b1_power = std::pow(static_cast<T>(o.beta_1), t);
  const T b2_power = std::pow(static_cast<T>(o.beta_2), t);
  const T alpha = s.lr * std::sqrt(T(1) - b2_power) / (T(1) - b1_power);
  const T one_minus_b1 = static_cast<T>(1.0 - o.beta_1),
          one_minus_b2 = static_cast<T>(1.0 - o.beta_2);
  const T eps = static_cast<T>(o.epsilon);
  T* m = s.slots[0];
  T* v = s.slots[1];
  T* v_hat = o.amsgrad ? s.slots[2] : nullptr;
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    m[k] += (g - m[k]) * one_minus_b1;
    v[k] += (g * g - v[k]) * one_minus_b2;
    T denom_v = v[k];
    if (v_hat) {
      v_hat[k] = std::max(v_hat[k], v[k]);
      denom_v = v_hat[k];
    }
    s.theta[k] -= (m[k] * alpha) / (std::sqrt(denom_v) + eps);
  }
}

template <typename T>
void rmsprop_step(const ShardStep<T>& s, const RmspropParams& o) {
  const T rho = static_cast<T>(o.rho), one_minus_rho = static_cast<T>(1.0 - o.rho);
  const T eps = static_cast<T>(o.epsilon), mu = static_cast<T>(o.momentum);
  size_t next = 0;
  T* v = s.slots[next++];
  T* m = o.momentum > 0 ? s.slots[next++] : nullptr;
  T* a = o.centered ? s.slots[next++] : nullptr;
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    v[k] = rho * v[k] + one_minus_rho * (g * g);
    T denominator;
    if (a) {
      a[k] = rho * a[k] + one_minus_rho * g;
      denominator = v[k] - a[k] * a[k] + eps;
    } else {
      denominator = v[k] + eps;
    }
    const T increment = (s.lr * g) / std::sqrt(denominator);
    if (m) {
      m[k] = mu * m[k] + increment;
      s.theta[k] -= m[k];
    } else {
      s.theta[k] -= increment;
    }
  }
}

template <typename T>
void adagrad_step(const ShardStep<T>& s, const AdagradParams& o) {
  const T eps = static_cast<T>(o.epsilon);
  T* acc = s.slots[0];
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    acc[k] += g * g;
    s.theta[k] -= (s.lr * g) / std::sqrt(acc[k] + eps);
  }
}

template <typename T>
void lion_step(const ShardStep<T>& s, const LionParams& o) {
  const T b1 = static_cast<T>(o.beta_1), b2 = static_cast<T>(o.beta_2);
  const T one_minus_b1 = T(1) - b1, one_minus_b2 = T(1) - b2;  // Keras: 1.0 - cast(beta)
  T* m = s.slots[0];
  for (int64_t k = 0; k < s.n; ++k) {
    const T g = s.grad[k];
    const T c = m[k] * b1 + g * one_minus_b1;
    const T sign = c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0));
    s.theta[k] -= s.lr * sign;
    m[k] = m[k] * b2 + g * one_minus_b2;
  }
}

}  // namespace

void sum_of_squares_cpu(const SumOfSquares& args) {
  const Array::Shard& s = *args.shard;
  double& sum = *args.sum;
  const int64_t n = s.box.num_elements();
  for (int64_t k = 0; k < n; ++k) {
    const double x = args.dtype == DType::kF32
                         ? reinterpret_cast<const float*>(s.buffer.data())[k]
                         : reinterpret_cast<const double*>(s.buffer.data())[k];
    sum += x * x;
  }
}

void optimizer_prepare_cpu(const OptimizerPrepare& args) {
  cpu_kernels::dispatch_float(args.step.dtype, [&]<typename T>(T* /*tag*/) {
    std::vector<T> buffer;
    with_shard_step<T>(args.step, buffer, [&](const ShardStep<T>& s) {
      // An empty box (uneven splits leave some) has no buffer: memcpy of null is undefined.
      if (s.n > 0) {
        std::memcpy(args.prepared->buffer.data(), s.grad, static_cast<size_t>(s.n) * sizeof(T));
      }
    });
  });
}

void sgd_update_cpu(const SgdUpdate& args) {
  update(args, [](const auto& s, const SgdParams& o) { sgd_step(s, o.momentum, o.nesterov); });
}

void adam_update_cpu(const AdamUpdate& args) {
  update(args, [](const auto& s, const AdamParams& o) { adam_step(s, o); });
}

void rmsprop_update_cpu(const RmspropUpdate& args) {
  update(args, [](const auto& s, const RmspropParams& o) { rmsprop_step(s, o); });
}

void adagrad_update_cpu(const AdagradUpdate& args) {
  update(args, [](const auto& s, const AdagradParams& o) { adagrad_step(s, o); });
}

void lion_update_cpu(const LionUpdate& args) {
  update(args, [](const auto& s, const LionParams& o) { lion_step(s, o); });
}

void write_scalar_cpu(const WriteScalar& args) {
  std::memcpy(args.shard->buffer.data(), args.value, args.bytes);
}

}  // namespace meshlayout
