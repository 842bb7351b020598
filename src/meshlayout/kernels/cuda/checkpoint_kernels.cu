// checkpoint_kernels.cu — CUDA implementations of kernels/hf_checkpoint.h's
// hf_permute_into_shard (a staged F32/BF16/F16 block permuted and converted to F32 into a
// region of a shard: exact conversions, so bit-identical to the CPU op) and find_non_finite
// (the first non-finite element, reported to the host), and of optimizer.h's sum_of_squares
// (a double-precision tree reduction: the CPU op sums in element order, so results agree to
// rounding, ~1e-15 relative). Registered by register_cuda_memory_kernels() (memory_kernels.cu).
//
// The staging block of hf_permute_into_shard may be device memory (the caller allocated it from
// the shard's device, the documented contract) or host memory (pageable or pinned): host
// staging is copied up to stream-ordered scratch first, then permuted on the GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/kernels/hf_checkpoint.h"
#include "meshlayout/kernels/optimizer.h"

namespace meshlayout::cuda_kernels {
namespace {

constexpr int kMaxPermuteRank = 12;

// Output element k (coordinates k_i over out_shape) reads source element Σ k_i·src_stride[i]
// and writes dst element Σ k_i·dst_stride[i].
struct PermuteToF32 {
  const void* src;
  float* dst;
  int rank;
  int64_t out_shape[kMaxPermuteRank];
  int64_t src_stride[kMaxPermuteRank];
  int64_t dst_stride[kMaxPermuteRank];
};

// float_from_bf16 / float_from_f16 of init/float_convert.h (exact conversions).
__device__ __forceinline__ float load_f32(float v) { return v; }
struct Bf16Bits {
  uint16_t bits;
};
struct F16Bits {
  uint16_t bits;
};
__device__ __forceinline__ float load_f32(Bf16Bits v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}
__device__ __forceinline__ float load_f32(F16Bits v) {
  const uint32_t bits = v.bits;
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24 (exact)
    const float magnitude = __fmul_rn(static_cast<float>(mantissa), 0x1p-24f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7F800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

template <typename S>
__global__ void permute_to_f32_kernel(const PermuteToF32 p, int64_t total) {
  const S* src = static_cast<const S*>(p.src);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, s_off = 0, d_off = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t k = rest % p.out_shape[d];
      rest /= p.out_shape[d];
      s_off += k * p.src_stride[d];
      d_off += k * p.dst_stride[d];
    }
    p.dst[d_off] = load_f32(src[s_off]);
  }
}

void hf_permute_into_shard_cuda(const HfPermuteIntoShard& a) {
  const Array::Shard& shard = *a.dst;
  const int64_t id = shard.device_id;
  const Shape& view = *a.view_shape;
  const size_t rank = a.perm.size();
  size_t elem = 0;
  switch (a.src_dtype) {
    case DType::kF32:
      elem = 4;
      break;
    case DType::kBF16:
    case DType::kF16:
      elem = 2;
      break;
    default:
      unsupported_dtype("hf_permute_into_shard", a.src_dtype, "F32, BF16 or F16");
  }
  if (rank > static_cast<size_t>(kMaxPermuteRank) || view.size() != rank) {
    throw ValueError(concat({"hf_permute_into_shard on CUDA: rank ", std::to_string(rank),
                             " (view rank ", std::to_string(view.size()), ") is not supported"}));
  }
  const int64_t total = num_elements(view);
  if (total == 0) return;
  cudaStream_t s = cuda::enter_device(id);

  PermuteToF32 p{};
  p.rank = static_cast<int>(rank);
  std::vector<int64_t> view_strides(rank, 1), shard_strides(rank, 1);
  for (size_t d = rank; d-- > 1;) {
    view_strides[d - 1] = view_strides[d] * view[d];
    shard_strides[d - 1] = shard_strides[d] * shard.box.shape[d];
  }
  int64_t offset = 0;
  for (size_t i = 0; i < rank; ++i) {
    p.out_shape[i] = view[static_cast<size_t>(a.perm[i])];
    p.src_stride[i] = view_strides[static_cast<size_t>(a.perm[i])];
    p.dst_stride[i] = shard_strides[i];
    offset += (a.region->offset[i] - shard.box.offset[i]) * shard_strides[i];
  }
  p.dst = reinterpret_cast<float*>(a.dst->buffer.data()) + offset;

  // Host staging (pageable or pinned) goes up first; device (or managed) staging is read where
  // it is.
  cudaPointerAttributes attributes{};
  const bool on_device =
      cudaPointerGetAttributes(&attributes, a.staging) == cudaSuccess &&
      (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
  cudaGetLastError();
  const size_t bytes = static_cast<size_t>(total) * elem;
  std::optional<DeviceScratch> scratch;
  p.src = a.staging;
  if (!on_device) {
    scratch.emplace(bytes, s, id);
    copy_host_to_device(scratch->as<std::byte>(), a.staging, bytes, s, id,
                        "hf_permute_into_shard (staging upload)");
    p.src = scratch->as<std::byte>();
  }
  switch (a.src_dtype) {
    case DType::kF32:
      permute_to_f32_kernel<float><<<grid_for(total), kThreads, 0, s>>>(p, total);
      break;
    case DType::kBF16:
      permute_to_f32_kernel<Bf16Bits><<<grid_for(total), kThreads, 0, s>>>(p, total);
      break;
    default:
      permute_to_f32_kernel<F16Bits><<<grid_for(total), kThreads, 0, s>>>(p, total);
      break;
  }
  cuda::check_launch("hf_permute_into_shard", id);
  // No synchronization: device staging comes from the device's memory, whose blocks are
  // allocated and freed in the order of this same stream (runtime/cuda/cuda_memory.cc), so a
  // free right after this returns waits for the kernel.
}

__global__ void first_non_finite_kernel(const float* x, int64_t n, unsigned long long* first) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if ((__float_as_uint(x[i]) & 0x7F800000u) == 0x7F800000u) {
      atomicMin(first, static_cast<unsigned long long>(i));
    }
  }
}

void find_non_finite_cuda(const FindNonFinite& a) {
  *a.first = -1;
  const Array::Shard& sh = *a.shard;
  const int64_t n = num_elements(sh.box.shape);
  if (n == 0) return;
  const int64_t id = sh.device_id;
  cudaStream_t s = cuda::enter_device(id);
  DeviceScratch first(sizeof(unsigned long long), s, id);
  cuda::check(cudaMemsetAsync(first.as<void>(), 0xFF, sizeof(unsigned long long), s),
              "find_non_finite", id);
  const float* x = elements<float>(&sh);
  first_non_finite_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, first.as<unsigned long long>());
  cuda::check_launch("find_non_finite", id);
  unsigned long long index = 0;
  cuda::check(cudaMemcpyAsync(&index, first.as<void>(), sizeof(index), cudaMemcpyDeviceToHost, s),
              "find_non_finite", id);
  cuda::check(cudaStreamSynchronize(s), "find_non_finite", id);
  if (index == ~0ULL) return;
  float value = 0;
  cuda::check(cudaMemcpyAsync(&value, x + index, sizeof(float), cudaMemcpyDeviceToHost, s),
              "find_non_finite", id);
  cuda::check(cudaStreamSynchronize(s), "find_non_finite", id);
  *a.first = static_cast<int64_t>(index);
  *a.value = value;
}

constexpr int kReduceBlocks = 1024;
constexpr int kReduceThreads = 256;

template <typename T>
__global__ void sum_squares_blocks(const T* x, int64_t n, double* partial) {
  __shared__ double sums[kReduceThreads];
  double sum = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = static_cast<double>(x[i]);
    sum = __dadd_rn(sum, __dmul_rn(v, v));  // as the CPU: the square rounded, then added
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      sums[threadIdx.x] = __dadd_rn(sums[threadIdx.x], sums[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

__global__ void sum_partials(const double* partial, int count, double* out) {
  __shared__ double sums[kReduceThreads];
  double sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kReduceThreads) {
    sum = __dadd_rn(sum, partial[i]);
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kReduceThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      sums[threadIdx.x] = __dadd_rn(sums[threadIdx.x], sums[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sums[0];
}

void sum_of_squares_cuda(const SumOfSquares& a) {
  const Array::Shard& sh = *a.shard;
  const int64_t n = sh.box.num_elements();
  if (n == 0) return;
  const int64_t id = sh.device_id;
  cudaStream_t s = cuda::enter_device(id);
  const int blocks =
      static_cast<int>(std::min<int64_t>(kReduceBlocks, grid_for(n, kReduceThreads)));
  DeviceScratch partial(sizeof(double) * (static_cast<size_t>(blocks) + 1), s, id);
  double* p = partial.as<double>();
  if (a.dtype == DType::kF32) {
    sum_squares_blocks<float><<<blocks, kReduceThreads, 0, s>>>(elements<float>(&sh), n, p);
  } else if (a.dtype == DType::kF64) {
    sum_squares_blocks<double><<<blocks, kReduceThreads, 0, s>>>(elements<double>(&sh), n, p);
  } else {
    unsupported_dtype("sum_of_squares", a.dtype);
  }
  cuda::check_launch("sum_of_squares", id);
  sum_partials<<<1, kReduceThreads, 0, s>>>(p, blocks, p + blocks);
  cuda::check_launch("sum_of_squares", id);
  double total = 0;
  cuda::check(cudaMemcpyAsync(&total, p + blocks, sizeof(double), cudaMemcpyDeviceToHost, s),
              "sum_of_squares", id);
  cuda::check(cudaStreamSynchronize(s), "sum_of_squares", id);
  *a.sum += total;
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_checkpoint_kernels() {
  using namespace cuda_kernels;
  hf_permute_into_shard.define(DeviceKind::kCuda, &hf_permute_into_shard_cuda);
  find_non_finite.define(DeviceKind::kCuda, &find_non_finite_cuda);
  sum_of_squares.define(DeviceKind::kCuda, &sum_of_squares_cuda);
}

}  // namespace meshlayout::internal_cuda
