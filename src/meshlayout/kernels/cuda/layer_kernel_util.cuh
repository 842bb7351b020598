// layer_kernel_util.cuh — what the CUDA layer kernels (layer_kernels.cu, attention_kernels.cu,
// cross_entropy_kernels.cu, layer_backward_kernels.cu) share, in namespace layer_cuda: a shard's
// device bytes as T, the F32/F64 dispatch (ValueError for another dtype), launch sizes,
// stream-ordered scratch memory, block reductions, and the arithmetic that keeps the CPU
// kernels' results:
//   - mul/add/sub/div never contract into an FMA (the CPU build has none: same roundings);
//   - exp_e/tanh_e of a float are computed in double and rounded to float (glibc's expf and
//     tanhf are correctly rounded in nearly all cases, so the results match the CPU's);
// and the registration functions of the files other than layer_kernels.cu.
//
// Example (an element-wise op):
//   cudaStream_t s = cuda::enter_device(a.y->device_id);
//   dispatch_float(a.dtype, "soft_cap_shard", a.y->device_id, [&]<typename E>(E*) {
//     cap_kernel<E><<<grid_for(n), kThreads, 0, s>>>(device_ptr<E>(a.y), n, E(a.cap));
//   });
//   cuda::check_launch("soft_cap_shard", a.y->device_id);
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "meshlayout/array/array.h"
#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/cuda/cuda_context.h"

namespace meshlayout::internal_cuda {
void register_cuda_attention_kernels();           // attention_kernels.cu: attention, rotate_half
void register_cuda_cross_entropy_kernels();       // cross_entropy_kernels.cu
void register_cuda_layer_backward_kernels();      // layer_backward_kernels.cu: the backward ops
void register_cuda_attention_backward_kernels();  // attention_backward_kernels.cu
void register_cuda_attention_shard_kernels();     // attention_shard_kernels.cu
}  // namespace meshlayout::internal_cuda

// The helpers live in their own namespace (the other kernel files' are in cuda_kernels).
namespace meshlayout::layer_cuda {

// ---- Shards ----

template <typename T>
T* device_ptr(Array::Shard* s) {
  return s ? reinterpret_cast<T*>(s->buffer.data()) : nullptr;
}
template <typename T>
const T* device_ptr(const Array::Shard* s) {
  return s ? reinterpret_cast<const T*>(s->buffer.data()) : nullptr;
}

/// Runs f(E*) with a null E* for F32 (float) or F64 (double); ValueError naming the op and the
/// device for any other dtype.
template <typename F>
void dispatch_float(DType dtype, std::string_view op, int64_t device_id, F&& f) {
  if (dtype == DType::kF32) {
    f(static_cast<float*>(nullptr));
  } else if (dtype == DType::kF64) {
    f(static_cast<double*>(nullptr));
  } else {
    throw ValueError(std::string(op) + " on gpu:" + std::to_string(device_id) +
                     " needs F32 or F64 elements, got " + std::string(dtype_name(dtype)));
  }
}

// ---- Launches ----

constexpr int kThreads = 256;

/// Blocks of kThreads for a grid-stride loop over n items (at least 1, at most 65535·32).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = int64_t{65535} * 32;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

/// Device memory for the duration of an op, allocated and freed in stream order on `stream`.
class StreamScratch {
 public:
  StreamScratch(size_t bytes, cudaStream_t stream, std::string_view what, int64_t device_id)
      : stream_(stream) {
    cuda::check(cudaMallocAsync(&data_, bytes == 0 ? 1 : bytes, stream), what, device_id);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  ~StreamScratch() { cudaFreeAsync(data_, stream_); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  cudaStream_t stream_;
};

// ---- Arithmetic without contraction ----

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }

__device__ __forceinline__ float exp_e(float x) { return static_cast<float>(::exp(double(x))); }
__device__ __forceinline__ double exp_e(double x) { return ::exp(x); }
__device__ __forceinline__ float tanh_e(float x) { return static_cast<float>(::tanh(double(x))); }
__device__ __forceinline__ double tanh_e(double x) { return ::tanh(x); }

// ---- Block reductions (blockDim.x a multiple of 32, at most 1024) ----

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
/// std::max(a, b): a < b ? b : a.
template <typename T>
__device__ __forceinline__ T max_e(T a, T b) {
  return a < b ? b : a;
}
template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = max_e(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

/// The sum over the block of every thread's v, returned to every thread. `shared`: 32 T.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  T total = 0;
  for (int w = 0; w < warps; ++w) total += shared[w];
  return total;
}

/// The maximum over the block of every thread's v, to every thread.
template <typename T>
__device__ T block_max(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  T m = shared[0];
  for (int w = 1; w < warps; ++w) m = max_e(m, shared[w]);
  return m;
}

/// The minimum over the block of every thread's v, to every thread.
__device__ inline long long block_min(long long v, long long* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const long long other = __shfl_down_sync(0xffffffffu, v, o);
    v = other < v ? other : v;
  }
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  long long m = shared[0];
  for (int w = 1; w < warps; ++w) m = shared[w] < m ? shared[w] : m;
  return m;
}

}  // namespace meshlayout::layer_cuda
