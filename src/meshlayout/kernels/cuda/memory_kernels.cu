// memory_kernels.cu — the CUDA implementations of kernels/memory.h (copies on a device, from the
// host, box copies, scalar fills, the in-place scale; the initializer fills are in
// initializer_kernels.cu), of the memory ops of kernels/hf_checkpoint.h (in
// checkpoint_kernels.cu) and of optimizer.h's write_scalar and sum_of_squares (ibid.).
// register_cuda_memory_kernels() defines them all. Copies move bytes (bit-exact); the fill
// and the scale compute as the CPU ops do (F32 scale: the product in double, rounded to float).
#include <cuda_runtime.h>

#include <vector>

#include "meshlayout/kernels/cuda/register.h"
#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/kernels/hf_checkpoint.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/kernels/optimizer.h"

namespace meshlayout::internal_cuda {
// initializer_kernels.cu and checkpoint_kernels.cu.
void register_cuda_initializer_kernels();
void register_cuda_checkpoint_kernels();
}  // namespace meshlayout::internal_cuda

namespace meshlayout::cuda_kernels {
namespace {

void copy_runs_cuda(const CopyRuns& a) {
  if (a.run_bytes == 0 || a.runs <= 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  StridedCopy c{};
  c.dst = a.dst->buffer.data() + a.dst_offset;
  c.src = a.src->buffer.data() + a.src_offset;
  c.run_bytes = a.run_bytes;
  c.rank = 1;
  c.shape[0] = a.runs;
  c.dst_stride[0] = static_cast<int64_t>(a.dst_stride);
  c.src_stride[0] = static_cast<int64_t>(a.src_stride);
  strided_copy(c, s, id, "copy_runs");
}

void copy_from_host_cuda(const CopyFromHost& a) {
  if (a.bytes == 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  copy_host_to_device(a.dst->buffer.data() + a.dst_offset, a.host, a.bytes, s, id,
                      "copy_from_host");
}

// Row-major element strides of `box` in bytes.
std::vector<int64_t> byte_strides(const Box& box, size_t elem) {
  std::vector<int64_t> strides(box.shape.size());
  int64_t stride = static_cast<int64_t>(elem);
  for (size_t d = box.shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= box.shape[d];
  }
  return strides;
}

void copy_box_on_device_cuda(const CopyBoxOnDevice& a) {
  if (a.region.num_elements() == 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  const size_t rank = a.region.shape.size();
  const std::vector<int64_t> ds = byte_strides(a.dst_box, a.elem),
                             ss = byte_strides(a.src_box, a.elem);
  StridedCopy c{};
  c.dst = a.dst->buffer.data();
  c.src = a.src->buffer.data();
  for (size_t d = 0; d < rank; ++d) {
    c.dst += (a.region.offset[d] - a.dst_box.offset[d]) * ds[d];
    c.src += (a.region.offset[d] - a.src_box.offset[d]) * ss[d];
  }
  // The last dimension is the run (contiguous on both sides); the others are strided.
  if (rank == 0) {
    c.run_bytes = a.elem;
  } else {
    c.run_bytes = static_cast<size_t>(a.region.shape[rank - 1]) * a.elem;
    if (rank - 1 > static_cast<size_t>(kMaxCopyRank)) {
      throw ValueError(concat({"copy_box_on_device on CUDA: rank ", std::to_string(rank),
                               " is above the ", std::to_string(kMaxCopyRank + 1), " supported"}));
    }
    c.rank = static_cast<int>(rank - 1);
    for (size_t d = 0; d + 1 < rank; ++d) {
      c.shape[d] = a.region.shape[d];
      c.dst_stride[d] = ds[d];
      c.src_stride[d] = ss[d];
    }
  }
  strided_copy(c, s, id, "copy_box_on_device");
}

template <typename T>
__global__ void fill_kernel(T* p, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = value;
  }
}

void fill_scalar_cuda(const FillScalar& a) {
  Array::Shard& sh = *a.shard;
  const int64_t n = sh.box.num_elements();
  if (n == 0) return;
  cudaStream_t s = cuda::enter_device(sh.device_id);
  // As the CPU op: F64 from the float value, anything else as F32.
  if (a.dtype == DType::kF64) {
    fill_kernel<double>
        <<<grid_for(n), kThreads, 0, s>>>(elements<double>(&sh), static_cast<double>(a.value), n);
  } else {
    fill_kernel<float><<<grid_for(n), kThreads, 0, s>>>(elements<float>(&sh), a.value, n);
  }
  cuda::check_launch("fill_scalar", sh.device_id);
}

__global__ void scale_f32_kernel(float* p, double factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = __double2float_rn(__dmul_rn(static_cast<double>(p[i]), factor));
  }
}

__global__ void scale_f64_kernel(double* p, double factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = __dmul_rn(p[i], factor);
  }
}

void scale_shard_cuda(const ScaleInPlace& a) {
  Array::Shard& sh = *a.shard;
  const int64_t n = sh.box.num_elements();
  if (n == 0) return;
  cudaStream_t s = cuda::enter_device(sh.device_id);
  if (a.dtype == DType::kF32) {
    scale_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(elements<float>(&sh), a.factor, n);
  } else if (a.dtype == DType::kF64) {
    scale_f64_kernel<<<grid_for(n), kThreads, 0, s>>>(elements<double>(&sh), a.factor, n);
  } else {
    unsupported_dtype("scale_shard", a.dtype);
  }
  cuda::check_launch("scale_shard", sh.device_id);
}

void write_scalar_cuda(const WriteScalar& a) {
  if (a.bytes == 0) return;
  const int64_t id = a.shard->device_id;
  cudaStream_t s = cuda::enter_device(id);
  copy_host_to_device(a.shard->buffer.data(), a.value, a.bytes, s, id, "write_scalar");
}

void shard_host_bytes_cuda(const ShardHostBytes& a) {
  *a.bytes = nullptr;  // GPU memory: a file read cannot land in it, the caller stages
}

void copy_replica_shard_cuda(const CopyReplicaShard& a) {
  const size_t bytes = a.src->buffer.size();
  if (bytes == 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  wait_for_device(s, id, a.src->device_id);
  cuda::check(
      cudaMemcpyAsync(a.dst->buffer.data(), a.src->buffer.data(), bytes, cudaMemcpyDefault, s),
      "copy_replica_shard", id);
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_memory_kernels() {
  using namespace cuda_kernels;
  copy_runs.define(DeviceKind::kCuda, &copy_runs_cuda);
  copy_from_host.define(DeviceKind::kCuda, &copy_from_host_cuda);
  copy_box_on_device.define(DeviceKind::kCuda, &copy_box_on_device_cuda);
  fill_scalar.define(DeviceKind::kCuda, &fill_scalar_cuda);
  scale_shard.define(DeviceKind::kCuda, &scale_shard_cuda);
  write_scalar.define(DeviceKind::kCuda, &write_scalar_cuda);
  shard_host_bytes.define(DeviceKind::kCuda, &shard_host_bytes_cuda);
  copy_replica_shard.define(DeviceKind::kCuda, &copy_replica_shard_cuda);
  register_cuda_initializer_kernels();
  register_cuda_checkpoint_kernels();
}

}  // namespace meshlayout::internal_cuda
