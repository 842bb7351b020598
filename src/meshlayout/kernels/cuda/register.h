// register.h — the CUDA implementations of the compute seam's kernels (built with
// -DMESHLAYOUT_CUDA=ON). register_cuda_kernels() defines every CUDA kernel op (KernelOp::define
// with DeviceKind::kCuda); it runs once, the first time an op is called for kind kCuda, so a
// program that never touches a GPU never initialises CUDA. Each file of kernels/cuda/ registers
// its own family through one of the functions below.
//
// Example:
//   register_cuda_kernels();                 // idempotent; called for you by KernelOp
//   rms_norm_forward.defined(DeviceKind::kCuda);   // true
#pragma once

namespace meshlayout {

/// Defines every CUDA kernel op; thread-safe and idempotent.
void register_cuda_kernels();

namespace internal_cuda {
void register_cuda_memory_kernels();  // memory_kernels.cu: copies, fills, initializers
void register_cuda_linear_kernels();  // linear_kernels.cu: matmul (cuBLAS), sums, bias, permutes
void register_cuda_layer_kernels();   // layer_kernels.cu: norms, RoPE, attention, gated, embedding
void register_cuda_optimizer_kernels();  // optimizer_kernels.cu: optimizer_prepare, the updates
void register_cuda_adafactor_kernels();  // adafactor_kernels.cu (called by the line above)
}  // namespace internal_cuda

}  // namespace meshlayout
