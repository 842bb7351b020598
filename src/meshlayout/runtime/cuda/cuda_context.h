// cuda_context.h — the CUDA device kind's process state (built with -DMESHLAYOUT_CUDA=ON): which
// physical GPU backs each virtual device gpu:K, the one stream per physical GPU on which every
// kernel and copy of its devices is enqueued, and CUDA error checks that name the device.
//
// Ordering rule (DESIGN "Compute and memory seam", CUDA): every kernel op, device copy and fill of
// a gpu:K shard is enqueued on stream_of(K) (one stream per physical GPU, shared by the virtual
// devices on it), so device work runs in the order the host issued it, across threads too; an op
// that hands bytes or values to the host synchronizes that stream before returning. Nothing uses
// the legacy default stream.
//
// Example (a kernel op's CUDA implementation):
//   void add_into_cuda(const AddInto& a) {
//     cudaStream_t s = cuda::enter_device(a.dst->device_id);     // current GPU + its stream
//     add_kernel<<<blocks, 256, 0, s>>>(…);
//     cuda::check_launch("add_into", a.dst->device_id);         // InternalError naming gpu:K
//   }
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace meshlayout::cuda {

/// Physical GPUs this process sees (cudaGetDeviceCount); 0 when there is no GPU or no driver.
/// Never throws.
int physical_gpu_count();

/// Why there is no GPU ("no CUDA driver: …", "no CUDA device"), empty when there is one.
std::string_view no_gpu_reason();

/// The physical GPU behind virtual device gpu:K: K mod physical_gpu_count().
int physical_gpu_of(int64_t device_id);

/// Makes gpu:K's physical GPU current on the calling thread and returns its stream.
/// FailedPreconditionError when the process has no GPU.
cudaStream_t enter_device(int64_t device_id);

/// The stream of gpu:K's physical GPU (without changing the current device).
cudaStream_t stream_of(int64_t device_id);

/// Waits until everything enqueued for gpu:K's physical GPU has finished (and reports any
/// asynchronous error, naming the device).
void synchronize_device(int64_t device_id);

/// Throws InternalError("CUDA error on gpu:K in <what>: <name>: <description>") unless
/// status == cudaSuccess (device_id < 0: no device named). cudaErrorMemoryAllocation is a
/// ResourceExhaustedError.
void check(cudaError_t status, std::string_view what, int64_t device_id = -1);

/// check(cudaGetLastError(), kernel, device_id): call right after every kernel launch.
void check_launch(std::string_view kernel, int64_t device_id);

/// Enqueues a copy of `bytes` host bytes to device memory `dst` on gpu:K's stream `s` without
/// making the host wait: bytes up to 4 MiB go through a page-locked block of a per-GPU pool
/// (reused once an event says its copy has finished), so the host returns at once and `host`
/// may be reused; larger copies are cudaMemcpyAsync from `host` (pageable: the driver waits for
/// the stream first). A cudaMemcpyAsync from pageable memory would wait for all the stream's
/// earlier work, which stalls every op that uploads a small table (measured: decode 12.6 ms per
/// token on the H100 with per-op uploads of RoPE tables).
void upload_async(void* dst, const void* host, size_t bytes, int64_t device_id, cudaStream_t s);

}  // namespace meshlayout::cuda
