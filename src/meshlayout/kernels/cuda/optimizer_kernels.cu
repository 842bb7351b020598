// optimizer_kernels.cu — the CUDA implementations of the optimizers' per-shard kernels:
// optimizer.h's optimizer_prepare, and the updates of sgd_update.h, adam_update.h (Adam and
// AdamW: AdamW's decoupled weight decay is the step's weight_decay), rmsprop_update.h,
// adagrad_update.h and lion_update.h; its register function also registers adafactor_kernels.cu.
// (write_scalar and sum_of_squares are in memory_kernels.cu and checkpoint_kernels.cu.)
//
// Each update is one element-wise kernel that does what the CPU does in its passes
// (kernels/cpu/optimizer_step.h, then cpu/<name>_update.cc), per element k: the gradient cast to
// the variable's type T and clipped (clipvalue: std::clamp; clipnorm/global_clipnorm:
// g·mul/div), θ ← θ − θ·wd·lr when weight_decay is set, then the optimizer's rule. The arithmetic
// is the CPU's, operation for operation in T, with mul/add/sub/div/sqrt rounded once each (no FMA
// contraction: the CPU build has none), so results are bit-identical to the CPU for F32 and F64.
// The per-step scalars (Adam's α from std::pow, the casts of the parameters) are computed on the
// host by the same expressions as the CPU code.
//
// Example (what train/adam.cc runs per local shard of a gpu:K variable):
//   adam_update(DeviceKind::kCuda, {step, AdamParams{0.9, 0.999, 1e-7, false}});
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/adagrad_update.h"
#include "meshlayout/kernels/adam_update.h"
#include "meshlayout/kernels/cuda/register.h"
#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/kernels/lion_update.h"
#include "meshlayout/kernels/optimizer.h"
#include "meshlayout/kernels/rmsprop_update.h"
#include "meshlayout/kernels/sgd_update.h"
#include "meshlayout/runtime/cuda/cuda_context.h"

namespace meshlayout::cuda_kernels {
namespace {

// ---- Arithmetic rounded as the CPU's (one rounding per operation, never an FMA) ----

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

// ---- The step's preparation ----

enum class Clip : int { kNone, kValue, kNorm };

// What the preparation of element k needs, in the variable's type T.
template <typename T>
struct Prep {
  const void* grad;  // F32 or F64 elements
  bool grad_f64;
  Clip clip;
  T clip_value;          // kValue: clamp to [-c, c]
  T clip_mul, clip_div;  // kNorm: g·mul/div
  bool decay;
  T wd;
  T lr;
};

// The gradient of element k cast to T and clipped, as cpu's prepared_gradient.
template <typename T>
__device__ __forceinline__ T prepared_grad(const Prep<T>& p, int64_t k) {
  T g = p.grad_f64 ? static_cast<T>(static_cast<const double*>(p.grad)[k])
                   : static_cast<T>(static_cast<const float*>(p.grad)[k]);
  if (p.clip == Clip::kValue) {
    const T c = p.clip_value;
    g = g < -c ? -c : (c < g ? c : g);  // std::clamp(g, -c, c)
  } else if (p.clip == Clip::kNorm) {
    g = div(mul(g, p.clip_mul), p.clip_div);
  }
  return g;
}

// θ after the decoupled weight decay (θ − θ·wd·lr), as cpu's with_shard_step.
template <typename T>
__device__ __forceinline__ T decayed(const Prep<T>& p, T theta) {
  return p.decay ? sub(theta, mul(mul(theta, p.wd), p.lr)) : theta;
}

template <typename T>
Prep<T> make_prep(const OptimizerShardStep& a, std::string_view op) {
  if (a.grad_dtype != DType::kF32 && a.grad_dtype != DType::kF64) {
    unsupported_dtype(std::string(op) + " (gradient)", a.grad_dtype);
  }
  Prep<T> p{};
  p.grad = a.grad->buffer.data();
  p.grad_f64 = a.grad_dtype == DType::kF64;
  if (a.clipvalue) {
    p.clip = Clip::kValue;
    p.clip_value = static_cast<T>(*a.clipvalue);
  } else if (a.norm_clip) {
    p.clip = Clip::kNorm;
    p.clip_mul = static_cast<T>(a.norm_clip->first);
    p.clip_div = static_cast<T>(a.norm_clip->second);
  } else {
    p.clip = Clip::kNone;
  }
  p.decay = a.weight_decay.has_value();
  p.wd = a.weight_decay ? static_cast<T>(*a.weight_decay) : T(0);
  p.lr = static_cast<T>(a.lr);
  return p;
}

// ---- Kernels ----

template <typename T>
__global__ void prepare_kernel(T* theta, T* prepared, const Prep<T> p, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    prepared[k] = prepared_grad(p, k);
    if (p.decay) theta[k] = decayed(p, theta[k]);
  }
}

// One optimizer's update: rule(k, θ after decay, prepared g) updates the slots of element k and
// returns the new θ.
template <typename T, typename Rule>
__global__ void update_kernel(T* theta, const Prep<T> p, int64_t n, const Rule rule) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    theta[k] = rule(k, decayed(p, theta[k]), prepared_grad(p, k));
  }
}

// cpu/sgd_update.cc's sgd_step.
template <typename T>
struct SgdRule {
  T* m;  // null: no momentum slot
  T mu, lr;
  bool nesterov;
  __device__ T operator()(int64_t k, T theta, T g) const {
    if (!m) return sub(theta, mul(g, lr));
    const T mk = sub(mul(m[k], mu), mul(g, lr));
    m[k] = mk;
    return add(theta, nesterov ? sub(mul(mk, mu), mul(g, lr)) : mk);
  }
};

// cpu/adam_update.cc's adam_step.
template <typename T>
struct AdamRule {
  T *m, *v, *v_hat;  // v_hat null without amsgrad
  T alpha, one_minus_b1, one_minus_b2, eps;
  __device__ T operator()(int64_t k, T theta, T g) const {
    const T mk = add(m[k], mul(sub(g, m[k]), one_minus_b1));
    const T vk = add(v[k], mul(sub(mul(g, g), v[k]), one_minus_b2));
    m[k] = mk;
    v[k] = vk;
    T denom_v = vk;
    if (v_hat) {
      const T h = v_hat[k] < vk ? vk : v_hat[k];  // std::max(v_hat, v)
      v_hat[k] = h;
      denom_v = h;
    }
    return sub(theta, div(mul(mk, alpha), add(sqrt_rn(denom_v), eps)));
  }
};

// cpu/rmsprop_update.cc's rmsprop_step.
template <typename T>
struct RmspropRule {
  T *v, *m, *a;  // m null without momentum, a null unless centered
  T rho, one_minus_rho, eps, mu, lr;
  __device__ T operator()(int64_t k, T theta, T g) const {
    const T vk = add(mul(rho, v[k]), mul(one_minus_rho, mul(g, g)));
    v[k] = vk;
    T denominator;
    if (a) {
      const T ak = add(mul(rho, a[k]), mul(one_minus_rho, g));
      a[k] = ak;
      denominator = add(sub(vk, mul(ak, ak)), eps);
    } else {
      denominator = add(vk, eps);
    }
    const T increment = div(mul(lr, g), sqrt_rn(denominator));
    if (m) {
      const T mk = add(mul(mu, m[k]), increment);
      m[k] = mk;
      return sub(theta, mk);
    }
    return sub(theta, increment);
  }
};

// cpu/adagrad_update.cc's adagrad_step.
template <typename T>
struct AdagradRule {
  T* acc;
  T eps, lr;
  __device__ T operator()(int64_t k, T theta, T g) const {
    const T ak = add(acc[k], mul(g, g));
    acc[k] = ak;
    return sub(theta, div(mul(lr, g), sqrt_rn(add(ak, eps))));
  }
};

// cpu/lion_update.cc's lion_step.
template <typename T>
struct LionRule {
  T* m;
  T b1, b2, one_minus_b1, one_minus_b2, lr;
  __device__ T operator()(int64_t k, T theta, T g) const {
    const T mk = m[k];
    const T c = add(mul(mk, b1), mul(g, one_minus_b1));
    const T sign = c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0));
    m[k] = add(mul(mk, b2), mul(g, one_minus_b2));
    return sub(theta, mul(lr, sign));
  }
};

// ---- Ops ----

// ValueError unless the step has at least `needed` slot shards.
void require_slots(std::string_view op, const OptimizerShardStep& a, size_t needed) {
  if (a.slots.size() < needed) {
    throw ValueError(
        concat({op, " on gpu:", std::to_string(a.theta->device_id), ": needs ",
                std::to_string(needed), " slot shards, got ", std::to_string(a.slots.size())}));
  }
}

template <typename T>
T* slot(const OptimizerShardStep& a, size_t i) {
  return elements<T>(a.slots[i]);
}

// Dispatches on the variable's dtype, builds rule_for<T>(step) and runs update_kernel.
template <typename Params, typename MakeRule>
void run_update(std::string_view op, const OptimizerUpdate<Params>& args, MakeRule&& make_rule) {
  const OptimizerShardStep& a = args.step;
  const int64_t n = a.theta->box.num_elements();
  const int64_t id = a.theta->device_id;
  dispatch_f32_f64(op, a.dtype, [&]<typename T>(T* /*tag*/) {
    const Prep<T> p = make_prep<T>(a, op);
    const auto rule = make_rule(static_cast<T*>(nullptr), p);
    if (n == 0) return;  // an empty box (uneven splits) has no buffer
    cudaStream_t s = cuda::enter_device(id);
    update_kernel<T><<<grid_for(n), kThreads, 0, s>>>(elements<T>(a.theta), p, n, rule);
    cuda::check_launch(op, id);
  });
}

void optimizer_prepare_cuda(const OptimizerPrepare& args) {
  const OptimizerShardStep& a = args.step;
  const int64_t n = a.theta->box.num_elements();
  const int64_t id = a.theta->device_id;
  dispatch_f32_f64("optimizer_prepare", a.dtype, [&]<typename T>(T* /*tag*/) {
    const Prep<T> p = make_prep<T>(a, "optimizer_prepare");
    if (n == 0) return;
    cudaStream_t s = cuda::enter_device(id);
    prepare_kernel<T>
        <<<grid_for(n), kThreads, 0, s>>>(elements<T>(a.theta), elements<T>(args.prepared), p, n);
    cuda::check_launch("optimizer_prepare", id);
  });
}

void sgd_update_cuda(const SgdUpdate& args) {
  run_update("sgd_update", args, [&]<typename T>(T* /*tag*/, const Prep<T>& p) {
    const OptimizerShardStep& a = args.step;
    // As the CPU: the momentum rule whenever a slot is there.
    return SgdRule<T>{a.slots.empty() ? nullptr : slot<T>(a, 0),
                      static_cast<T>(args.params.momentum), p.lr, args.params.nesterov};
  });
}

void adam_update_cuda(const AdamUpdate& args) {
  run_update("adam_update", args, [&]<typename T>(T* /*tag*/, const Prep<T>& p) {
    const OptimizerShardStep& a = args.step;
    const AdamParams& o = args.params;
    require_slots("adam_update", a, o.amsgrad ? 3 : 2);
    // The CPU's scalars, by the same expressions (std::pow and std::sqrt in T on the host).
    const T t = static_cast<T>(a.iterations + 1);
    const T b1_power = std::pow(static_cast<T>(o.beta_1), t);
    const T b2_power = std::pow(static_cast<T>(o.beta_2), t);
    const T alpha = p.lr * std::sqrt(T(1) - b2_power) / (T(1) - b1_power);
    return AdamRule<T>{slot<T>(a, 0),
                       slot<T>(a, 1),
                       o.amsgrad ? slot<T>(a, 2) : nullptr,
                       alpha,
                       static_cast<T>(1.0 - o.beta_1),
                       static_cast<T>(1.0 - o.beta_2),
                       static_cast<T>(o.epsilon)};
  });
}

void rmsprop_update_cuda(const RmspropUpdate& args) {
  run_update("rmsprop_update", args, [&]<typename T>(T* /*tag*/, const Prep<T>& p) {
    const OptimizerShardStep& a = args.step;
    const RmspropParams& o = args.params;
    const bool momentum = o.momentum > 0;
    require_slots("rmsprop_update", a, 1 + (momentum ? 1 : 0) + (o.centered ? 1 : 0));
    size_t next = 0;
    T* v = slot<T>(a, next++);
    T* m = momentum ? slot<T>(a, next++) : nullptr;
    T* avg = o.centered ? slot<T>(a, next++) : nullptr;
    return RmspropRule<T>{v,
                          m,
                          avg,
                          static_cast<T>(o.rho),
                          static_cast<T>(1.0 - o.rho),
                          static_cast<T>(o.epsilon),
                          static_cast<T>(o.momentum),
                          p.lr};
  });
}

void adagrad_update_cuda(const AdagradUpdate& args) {
  run_update("adagrad_update", args, [&]<typename T>(T* /*tag*/, const Prep<T>& p) {
    require_slots("adagrad_update", args.step, 1);
    return AdagradRule<T>{slot<T>(args.step, 0), static_cast<T>(args.params.epsilon), p.lr};
  });
}

void lion_update_cuda(const LionUpdate& args) {
  run_update("lion_update", args, [&]<typename T>(T* /*tag*/, const Prep<T>& p) {
    require_slots("lion_update", args.step, 1);
    const T b1 = static_cast<T>(args.params.beta_1), b2 = static_cast<T>(args.params.beta_2);
    return LionRule<T>{slot<T>(args.step, 0), b1, b2, T(1) - b1, T(1) - b2, p.lr};
  });
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_optimizer_kernels() {
  using namespace cuda_kernels;
  optimizer_prepare.define(DeviceKind::kCuda, &optimizer_prepare_cuda);
  sgd_update.define(DeviceKind::kCuda, &sgd_update_cuda);
  adam_update.define(DeviceKind::kCuda, &adam_update_cuda);
  rmsprop_update.define(DeviceKind::kCuda, &rmsprop_update_cuda);
  adagrad_update.define(DeviceKind::kCuda, &adagrad_update_cuda);
  lion_update.define(DeviceKind::kCuda, &lion_update_cuda);
  register_cuda_adafactor_kernels();
}

}  // namespace meshlayout::internal_cuda
