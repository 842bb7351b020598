// kernel_op.h — KernelOp: one per-shard computation reached through the compute seam, with one
// implementation per device kind (DESIGN "Compute and memory seam"). Layers, models and
// optimizers never touch shard bytes: they call a KernelOp with the shards (Array::Shard) and
// the op runs the implementation of the shards' device kind. The CPU implementation is given
// where the op is declared (it is always linked); another kind registers its own with define()
// from its own files, e.g. a CUDA library's static initialiser. Calling an op that has no
// implementation for a kind is a NotFoundError naming the op and the kind. The CUDA kind's
// kernels (kernels/cuda/) are defined on the first call of any op for DeviceKind::kCuda.
//
// Example:
//   // kernels/prelu.h
//   void prelu_forward_cpu(const PreluForward& args);
//   inline KernelOp<void(const PreluForward&)> prelu_forward{"prelu_forward", &prelu_forward_cpu};
//   // nn/layers/activations/prelu.cc
//   prelu_forward(kind_of(y), PreluForward{&shard, alpha.shard_at(shard.position), …});
//   // kernels/cuda/prelu.cu (later)
//   static const bool defined = (prelu_forward.define(DeviceKind::kCuda, &prelu_forward_cuda),
//   true);
#pragma once

#include <array>
#include <string_view>
#include <utility>

#include "meshlayout/kernels/device_kind.h"

namespace meshlayout {
namespace internal_kernels {
[[noreturn]] void throw_missing_kernel(std::string_view op, DeviceKind kind);
/// Registers the kernels of `kind` if this build has them (CUDA: kernels/cuda/register.h), once.
void load_device_kind(DeviceKind kind);
}  // namespace internal_kernels

template <typename Signature>
class KernelOp;

template <typename R, typename... Args>
class KernelOp<R(Args...)> {
 public:
  using Fn = R (*)(Args...);
  /// An op named `name` (as errors show it) whose CPU implementation is `cpu`.
  constexpr KernelOp(std::string_view name, Fn cpu) : name_(name) {
    fns_[static_cast<size_t>(DeviceKind::kCpu)] = cpu;
  }
  KernelOp(const KernelOp&) = delete;
  KernelOp& operator=(const KernelOp&) = delete;

  /// Registers the implementation for `kind` (replacing any).
  void define(DeviceKind kind, Fn fn) { fns_[static_cast<size_t>(kind)] = fn; }
  bool defined(DeviceKind kind) const { return fns_[static_cast<size_t>(kind)] != nullptr; }
  std::string_view name() const { return name_; }

  /// Runs the implementation for `kind`.
  R operator()(DeviceKind kind, Args... args) const {
    Fn fn = fns_[static_cast<size_t>(kind)];
    if (fn == nullptr) {
      internal_kernels::load_device_kind(kind);  // a kind's kernels load on first use
      fn = fns_[static_cast<size_t>(kind)];
      if (fn == nullptr) internal_kernels::throw_missing_kernel(name_, kind);
    }
    return fn(std::forward<Args>(args)...);
  }

 private:
  std::string_view name_;
  std::array<Fn, kDeviceKindCount> fns_{};
};

}  // namespace meshlayout
