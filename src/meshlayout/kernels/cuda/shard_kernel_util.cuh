// shard_kernel_util.cuh — helpers shared by the CUDA kernel files of kernels/cuda/ (linear,
// memory, initializer kernels; included by .cu files only): typed views of a shard's device
// bytes, grid sizes for grid-stride loops, the F32/F64 dispatch with the error for other dtypes,
// stream-ordered device scratch, host → device copies of host arguments, the ordering and peer
// access between two physical GPUs, and a strided byte copy (cudaMemcpy2DAsync, or a kernel
// for any rank) that the copy ops share. No fmt here: nvcc's host pass cannot parse fmt 9.
//
// Example:
//   cudaStream_t s = cuda::enter_device(shard->device_id);
//   dispatch_f32_f64("add_into", dtype, [&]<typename T>(T* /*tag*/) {
//     add_kernel<T><<<grid_for(n), kThreads, 0, s>>>(elements<T>(dst), …);
//   });
//   cuda::check_launch("add_into", shard->device_id);
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "meshlayout/array/array.h"
#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/cuda/cuda_context.h"

namespace meshlayout::cuda_kernels {

/// Threads per block of the element-wise kernels.
inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `work` items (at least 1, at most 2^16: the loop does
/// the rest).
inline unsigned grid_for(int64_t work, int threads = kThreads) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 16));
}

template <typename T>
T* elements(Array::Shard* s) {
  return reinterpret_cast<T*>(s->buffer.data());
}
template <typename T>
const T* elements(const Array::Shard* s) {
  return reinterpret_cast<const T*>(s->buffer.data());
}

inline std::string concat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

/// ValueError: `op` on CUDA takes `expected`, not `dtype`.
[[noreturn]] inline void unsupported_dtype(std::string_view op, DType dtype,
                                           std::string_view expected = "F32 or F64") {
  throw ValueError(
      concat({op, " on CUDA: dtype ", dtype_name(dtype), " is not supported (", expected, ")"}));
}

/// f(float*) for F32, f(double*) for F64 (null tags), else unsupported_dtype.
template <typename F>
void dispatch_f32_f64(std::string_view op, DType dtype, F&& f) {
  if (dtype == DType::kF32) {
    f(static_cast<float*>(nullptr));
  } else if (dtype == DType::kF64) {
    f(static_cast<double*>(nullptr));
  } else {
    unsupported_dtype(op, dtype);
  }
}

/// `bytes` of device memory allocated on stream `s` (cudaMallocAsync) and freed on it
/// (cudaFreeAsync) at destruction: usable by work enqueued on `s` in between.
class DeviceScratch {
 public:
  DeviceScratch(size_t bytes, cudaStream_t s, int64_t device_id) : stream_(s) {
    cuda::check(cudaMallocAsync(&data_, bytes == 0 ? 1 : bytes, s), "cudaMallocAsync (scratch)",
                device_id);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() { cudaFreeAsync(data_, stream_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

/// `bytes` from host memory `host` to device memory `dst`, enqueued on `s`; the caller may reuse
/// `host` as soon as this returns. Up to 4 MiB go through cuda::upload_async's page-locked slots
/// (the host does not wait for the stream); larger copies from pinned memory synchronize the
/// stream, and from pageable memory are consumed before cudaMemcpyAsync returns.
inline void copy_host_to_device(void* dst, const void* host, size_t bytes, cudaStream_t s,
                                int64_t device_id, std::string_view what) {
  if (bytes == 0) return;
  if (bytes <= (size_t{4} << 20)) {
    cuda::upload_async(dst, host, bytes, device_id, s);
    return;
  }
  cudaPointerAttributes attributes{};
  const bool pinned = cudaPointerGetAttributes(&attributes, host) == cudaSuccess &&
                      attributes.type == cudaMemoryTypeHost;
  cudaGetLastError();  // an unregistered pointer may leave an error behind (older drivers)
  cuda::check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s), what, device_id);
  if (pinned) cuda::check(cudaStreamSynchronize(s), what, device_id);
}

/// Makes stream `s` (gpu:device_id's, current) wait for everything enqueued so far on the
/// stream of gpu:other's physical GPU. Nothing when both are on one GPU (one stream).
inline void wait_for_device(cudaStream_t s, int64_t device_id, int64_t other) {
  const int gpu = cuda::physical_gpu_of(device_id);
  if (cuda::physical_gpu_of(other) == gpu) return;
  const cudaStream_t other_stream = cuda::enter_device(other);
  cudaEvent_t event = nullptr;
  cuda::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate", other);
  cuda::check(cudaEventRecord(event, other_stream), "cudaEventRecord", other);
  cuda::enter_device(device_id);
  cuda::check(cudaStreamWaitEvent(s, event, 0), "cudaStreamWaitEvent", device_id);
  cuda::check(cudaEventDestroy(event), "cudaEventDestroy", device_id);
}

/// Lets kernels on gpu:device_id's GPU (current) read and write memory of gpu:other's GPU;
/// FailedPreconditionError when the hardware cannot. Once per pair of physical GPUs.
inline void ensure_peer_access(int64_t device_id, int64_t other) {
  const int gpu = cuda::physical_gpu_of(device_id), peer = cuda::physical_gpu_of(other);
  if (gpu == peer) return;
  static std::array<std::once_flag, 64 * 64> once;
  std::call_once(once[static_cast<size_t>(gpu * 64 + peer)], [&] {
    int can = 0;
    cuda::check(cudaDeviceCanAccessPeer(&can, gpu, peer), "cudaDeviceCanAccessPeer", device_id);
    if (!can) {
      throw FailedPreconditionError(
          concat({"gpu:", std::to_string(device_id),
                  " cannot access the memory of gpu:", std::to_string(other), " (physical GPUs ",
                  std::to_string(gpu), " and ", std::to_string(peer), " have no peer access)"}));
    }
    const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
    } else {
      cuda::check(status, "cudaDeviceEnablePeerAccess", device_id);
    }
  });
}

// ---- Strided copies ----

inline constexpr int kMaxCopyRank = 12;

/// Copies shape[0] × … × shape[rank-1] runs of run_bytes: run (i0, …) from
/// src + Σ i_d·src_stride[d] to dst + Σ i_d·dst_stride[d] (byte strides).
struct StridedCopy {
  std::byte* dst;
  const std::byte* src;
  size_t run_bytes;
  int rank;
  int64_t shape[kMaxCopyRank];
  int64_t dst_stride[kMaxCopyRank];
  int64_t src_stride[kMaxCopyRank];
};

template <typename W>
__global__ void strided_copy_kernel(const StridedCopy c, int64_t words_per_run, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t run = i / words_per_run;
    const int64_t word = i - run * words_per_run;
    int64_t d_off = 0, s_off = 0;
    for (int d = c.rank - 1; d >= 0; --d) {
      const int64_t idx = run % c.shape[d];
      run /= c.shape[d];
      d_off += idx * c.dst_stride[d];
      s_off += idx * c.src_stride[d];
    }
    reinterpret_cast<W*>(c.dst + d_off)[word] = reinterpret_cast<const W*>(c.src + s_off)[word];
  }
}

struct alignas(16) Word16 {
  uint4 v;
};

/// Runs `c` on `s`: one cudaMemcpyAsync or cudaMemcpy2DAsync where the layout allows it, else
/// a kernel moving the widest words that every address and stride is aligned to.
inline void strided_copy(StridedCopy c, cudaStream_t s, int64_t device_id, std::string_view what) {
  int64_t runs = 1;
  for (int d = 0; d < c.rank; ++d) runs *= c.shape[d];
  if (runs == 0 || c.run_bytes == 0) return;
  // Drop extents of 1; merge a dimension into the run where both sides continue it.
  int r = 0;
  for (int d = 0; d < c.rank; ++d) {
    if (c.shape[d] == 1) continue;
    c.shape[r] = c.shape[d];
    c.dst_stride[r] = c.dst_stride[d];
    c.src_stride[r] = c.src_stride[d];
    ++r;
  }
  c.rank = r;
  while (c.rank > 0 && c.dst_stride[c.rank - 1] == static_cast<int64_t>(c.run_bytes) &&
         c.src_stride[c.rank - 1] == static_cast<int64_t>(c.run_bytes)) {
    c.run_bytes *= static_cast<size_t>(c.shape[c.rank - 1]);
    --c.rank;
  }
  if (c.rank == 0) {
    cuda::check(cudaMemcpyAsync(c.dst, c.src, c.run_bytes, cudaMemcpyDeviceToDevice, s), what,
                device_id);
    return;
  }
  constexpr int64_t kMaxPitch = (int64_t{1} << 31) - 1;
  const auto pitch_ok = [&](int64_t p) {
    return p >= static_cast<int64_t>(c.run_bytes) && p <= kMaxPitch;
  };
  if (c.rank == 1 && pitch_ok(c.dst_stride[0]) && pitch_ok(c.src_stride[0])) {
    cuda::check(cudaMemcpy2DAsync(c.dst, static_cast<size_t>(c.dst_stride[0]), c.src,
                                  static_cast<size_t>(c.src_stride[0]), c.run_bytes,
                                  static_cast<size_t>(c.shape[0]), cudaMemcpyDeviceToDevice, s),
                what, device_id);
    return;
  }
  uint64_t bits =
      reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src) | c.run_bytes;
  for (int d = 0; d < c.rank; ++d) {
    bits |= static_cast<uint64_t>(c.dst_stride[d]) | static_cast<uint64_t>(c.src_stride[d]);
  }
  const auto launch = [&]<typename W>(W* /*tag*/) {
    const int64_t words = static_cast<int64_t>(c.run_bytes / sizeof(W));
    const int64_t total = words * runs;
    strided_copy_kernel<W><<<grid_for(total), kThreads, 0, s>>>(c, words, total);
  };
  if (bits % 16 == 0) {
    launch(static_cast<Word16*>(nullptr));
  } else if (bits % 8 == 0) {
    launch(static_cast<uint64_t*>(nullptr));
  } else if (bits % 4 == 0) {
    launch(static_cast<uint32_t*>(nullptr));
  } else if (bits % 2 == 0) {
    launch(static_cast<uint16_t*>(nullptr));
  } else {
    launch(static_cast<uint8_t*>(nullptr));
  }
  cuda::check_launch(what, device_id);
}

}  // namespace meshlayout::cuda_kernels
