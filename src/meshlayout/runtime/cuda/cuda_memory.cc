// cuda_memory.cc — see cuda_memory.h.
#include "meshlayout/runtime/cuda/cuda_memory.h"

#include <fmt/format.h>

#include <array>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/byte_size.h"
#include "meshlayout/runtime/cuda/cuda_context.h"

namespace meshlayout {
namespace {

cudaMemcpyKind kind_of(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyDirection::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyDirection::kDeviceToDevice:
      break;
  }
  return cudaMemcpyDeviceToDevice;
}

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int gpu) : gpu_(gpu) {}

  std::string_view name() const override { return "cuda"; }

  std::byte* allocate(size_t bytes) override {
    const cudaStream_t s = cuda::enter_device(gpu_);
    void* p = nullptr;
    const cudaError_t status = cudaMallocAsync(&p, bytes, s);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw ResourceExhaustedError(fmt::format(
          "out of GPU memory on physical GPU {}: asked {} ({} bytes), {} free of {}", gpu_,
          format_bytes(bytes), bytes, format_bytes(free), format_bytes(total)));
    }
    cuda::check(status, fmt::format("cudaMallocAsync of {} bytes", bytes), gpu_);
    return static_cast<std::byte*>(p);
  }

  void free(std::byte* block, size_t /*bytes*/) override {
    if (block == nullptr) return;
    const cudaStream_t s = cuda::enter_device(gpu_);
    cuda::check(cudaFreeAsync(block, s), "cudaFreeAsync", gpu_);
  }

  void copy_from_host(std::byte* dst, const std::byte* host_src, size_t bytes) override {
    if (bytes == 0) return;
    const cudaStream_t s = cuda::enter_device(gpu_);
    cuda::check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s),
                "cudaMemcpyAsync host to device", gpu_);
  }

  void copy_to_host(std::byte* host_dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    const cudaStream_t s = cuda::enter_device(gpu_);
    cuda::check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s),
                "cudaMemcpyAsync device to host", gpu_);
    cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize after a copy to the host", gpu_);
  }

  void copy_on_device(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes == 0) return;
    const cudaStream_t s = cuda::enter_device(gpu_);
    cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s),
                "cudaMemcpyAsync device to device", gpu_);
  }

  void copy_strided(const StridedCopy& c) override {
    if (c.dst_stride.size() != c.extent.size() || c.src_stride.size() != c.extent.size()) {
      throw ValueError(fmt::format(
          "copy_strided needs one dst and one src stride per extent: {} extents, {} dst "
          "strides, {} src strides",
          c.extent.size(), c.dst_stride.size(), c.src_stride.size()));
    }
    int64_t runs = 1;
    for (size_t d = 0; d < c.extent.size(); ++d) {
      if (c.extent[d] < 0) {
        throw ValueError(
            fmt::format("copy_strided: extent {} is {}, expected >= 0", d, c.extent[d]));
      }
      runs *= c.extent[d];
    }
    if (runs == 0 || c.run_bytes == 0) return;
    const cudaStream_t s = cuda::enter_device(gpu_);
    const cudaMemcpyKind kind = kind_of(c.direction);
    const size_t rank = c.extent.size();
    if (rank == 0) {
      cuda::check(cudaMemcpyAsync(c.dst, c.src, c.run_bytes, kind, s), "cudaMemcpyAsync", gpu_);
    } else {
      // The innermost dimension is the rows of one 2-D copy; the others are looped over.
      const int64_t rows = c.extent[rank - 1];
      size_t dpitch = static_cast<size_t>(c.dst_stride[rank - 1]);
      size_t spitch = static_cast<size_t>(c.src_stride[rank - 1]);
      if (rows == 1) dpitch = spitch = c.run_bytes;  // a pitch is checked even for one row
      const bool two_d = dpitch >= c.run_bytes && spitch >= c.run_bytes;
      const int64_t outer = runs / rows;
      std::vector<int64_t> index(rank - 1, 0);
      int64_t dst_off = 0, src_off = 0;
      for (int64_t o = 0; o < outer; ++o) {
        if (two_d) {
          cuda::check(cudaMemcpy2DAsync(c.dst + dst_off, dpitch, c.src + src_off, spitch,
                                        c.run_bytes, static_cast<size_t>(rows), kind, s),
                      "cudaMemcpy2DAsync", gpu_);
        } else {
          for (int64_t r = 0; r < rows; ++r) {
            cuda::check(cudaMemcpyAsync(c.dst + dst_off + r * c.dst_stride[rank - 1],
                                        c.src + src_off + r * c.src_stride[rank - 1],
                                        c.run_bytes, kind, s),
                        "cudaMemcpyAsync", gpu_);
          }
        }
        for (size_t d = rank - 1; d-- > 0;) {
          if (++index[d] < c.extent[d]) {
            dst_off += c.dst_stride[d];
            src_off += c.src_stride[d];
            break;
          }
          dst_off -= (c.extent[d] - 1) * c.dst_stride[d];
          src_off -= (c.extent[d] - 1) * c.src_stride[d];
          index[d] = 0;
        }
      }
    }
    if (c.direction == CopyDirection::kDeviceToHost) {
      cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize after a copy to the host",
                  gpu_);
    }
  }

  void synchronize() override { cuda::synchronize_device(gpu_); }

 private:
  int gpu_;
};

}  // namespace

DeviceMemory& cuda_device_memory(int64_t device_id) {
  const int gpu = cuda::physical_gpu_of(device_id);
  static std::mutex mu;
  static std::array<CudaMemory*, 64> memories{};  // never destroyed (static accounts free late)
  std::lock_guard<std::mutex> lock(mu);
  CudaMemory*& m = memories[static_cast<size_t>(gpu)];
  if (m == nullptr) m = new CudaMemory(gpu);
  return *m;
}

}  // namespace meshlayout
