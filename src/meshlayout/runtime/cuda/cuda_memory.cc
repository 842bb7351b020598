// cuda_memory.cc — see cuda_memory.h.
#include "meshlayout/runtime/cuda/cuda_memory.h"

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/cuda/cuda_context.h"
#include "meshlayout/runtime/cuda/strided_copy.h"

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
  // The device's stream-ordered pool keeps what it has reserved (release threshold: all), as
  // PyTorch's and XLA's allocators do: without it every synchronize returns the pool's unused
  // memory to the driver and the next allocation maps it again.
  explicit CudaMemory(int gpu) : gpu_(gpu) {
    cudaMemPool_t pool = nullptr;
    cuda::check(cudaDeviceGetDefaultMemPool(&pool, gpu), "cudaDeviceGetDefaultMemPool", gpu);
    uint64_t keep = UINT64_MAX;
    cuda::check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                "cudaMemPoolSetAttribute", gpu);
  }

  std::string_view name() const override { return "cuda"; }

  std::byte* allocate(size_t bytes) override {
    const cudaStream_t s = cuda::enter_device(gpu_);
    void* p = nullptr;
    const cudaError_t status = cudaMallocAsync(&p, bytes, s);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw ResourceExhaustedError(
          fmt::format("out of GPU memory on physical GPU {}: asked {} ({} bytes), {} free of {}",
                      gpu_, format_bytes(bytes), bytes, format_bytes(free), format_bytes(total)));
    }
    cuda::check(status, fmt::format("cudaMallocAsync of {} bytes", bytes), gpu_);
    return static_cast<std::byte*>(p);
  }

  // Runs in destructors, also those of static objects at exit, when the CUDA runtime may
  // already be unloading (cudaErrorCudartUnloading): it never throws. The process's memory goes
  // back with the process then; any other failure is reported on stderr.
  void free(std::byte* block, size_t bytes) noexcept override {
    if (block == nullptr) return;
    cudaError_t status = cudaSetDevice(gpu_);
    if (status == cudaSuccess) {
      try {
        status = cudaFreeAsync(block, cuda::stream_of(gpu_));
      } catch (...) {
        status = cudaErrorUnknown;
      }
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      if (status != cudaErrorCudartUnloading) {
        std::fprintf(stderr, "meshlayout: freeing %zu bytes on physical GPU %d failed: %s\n", bytes,
                     gpu_, cudaGetErrorString(status));
      }
    }
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
      for_each_outer_offset(c, rank - 1, [&](int64_t dst_off, int64_t src_off) {
        if (two_d) {
          cuda::check(cudaMemcpy2DAsync(c.dst + dst_off, dpitch, c.src + src_off, spitch,
                                        c.run_bytes, static_cast<size_t>(rows), kind, s),
                      "cudaMemcpy2DAsync", gpu_);
          return;
        }
        for (int64_t r = 0; r < rows; ++r) {
          cuda::check(
              cudaMemcpyAsync(c.dst + dst_off + r * c.dst_stride[rank - 1],
                              c.src + src_off + r * c.src_stride[rank - 1], c.run_bytes, kind, s),
              "cudaMemcpyAsync", gpu_);
        }
      });
    }
    if (c.direction == CopyDirection::kDeviceToHost) {
      cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize after a copy to the host", gpu_);
    }
  }

  void copy_strided_batch(std::span<const StridedCopy> copies) override {
    for (const StridedCopy& c : copies) {
      if (c.direction != CopyDirection::kDeviceToDevice) {
        throw ValueError("copy_strided_batch copies device to device only");
      }
    }
    cuda::launch_strided_copies(copies, cuda::enter_device(gpu_), gpu_);
  }

  void synchronize() override { cuda::synchronize_device(gpu_); }

  std::byte* allocate_staging(size_t bytes) override { return staging_cache().take(bytes, gpu_); }
  void free_staging(std::byte* block, size_t bytes) override {
    staging_cache().give(block, bytes, gpu_);
  }

 private:
  // Page-locked host blocks (portable: any GPU copies from them asynchronously), shared by the
  // GPUs of the process. Freed blocks are kept for the next staging requests (a load takes two
  // slots), up to kMaxCachedBlocks; a request takes the smallest cached block large enough.
  class StagingCache {
   public:
    static constexpr size_t kMaxCachedBlocks = 4;

    std::byte* take(size_t bytes, int gpu) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = cached_.lower_bound(bytes);
        if (it != cached_.end()) {
          std::byte* block = it->second;
          cached_.erase(it);
          return block;
        }
      }
      void* p = nullptr;
      const cudaError_t status = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw ResourceExhaustedError(fmt::format(
            "cannot page-lock {} ({} bytes) of host memory for staging copies to GPU {}",
            format_bytes(bytes), bytes, gpu));
      }
      cuda::check(status, fmt::format("cudaHostAlloc of {} bytes", bytes), gpu);
      std::lock_guard<std::mutex> lock(mu_);
      capacity_[static_cast<std::byte*>(p)] = bytes;
      return static_cast<std::byte*>(p);
    }

    void give(std::byte* block, size_t /*bytes*/, int gpu) {
      if (block == nullptr) return;
      std::byte* release = nullptr;
      {
        std::lock_guard<std::mutex> lock(mu_);
        cached_.emplace(capacity_.at(block), block);
        if (cached_.size() > kMaxCachedBlocks) {  // drop the smallest
          release = cached_.begin()->second;
          cached_.erase(cached_.begin());
          capacity_.erase(release);
        }
      }
      if (release != nullptr) cuda::check(cudaFreeHost(release), "cudaFreeHost", gpu);
    }

   private:
    std::mutex mu_;
    std::map<std::byte*, size_t> capacity_;     // every block handed out or cached
    std::multimap<size_t, std::byte*> cached_;  // capacity → free block
  };

  static StagingCache& staging_cache() {
    static StagingCache* cache = new StagingCache;  // never destroyed (used at exit)
    return *cache;
  }

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
