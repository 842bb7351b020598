// device_memory.h — DeviceMemory: the device-memory interface of a device kind (issue 25 item 3,
// DESIGN "Compute and memory seam"): allocate and free raw blocks, copy host → device, device →
// host and device → device, and byte-strided box copies (a box of runs with byte strides on
// either side, as cudaMemcpy3D / cudaMemcpy2D take them). host_memory() is the CPU kind's
// implementation, over host memory: 64-byte-aligned blocks (2 MiB-aligned, transparent huge pages
// advised, from 2 MiB), memcpy copies. MemoryAccount (device.h) allocates and frees its blocks
// through it, so every DeviceBuffer of a CPU device does; a CUDA kind provides its own
// (cudaMalloc, cudaMemcpyAsync on the device's stream) behind the same accounting and cache.
//
// Example:
//   DeviceMemory& m = host_memory();
//   std::byte* block = m.allocate(4096);
//   m.copy_from_host(block, host_bytes, 4096);
//   m.copy_strided({.dst = block, .src = other, .extent = {rows}, .dst_stride = {256},
//                   .src_stride = {1024}, .run_bytes = 256});      // a column block of a matrix
//   m.free(block, 4096);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace meshlayout {

/// A byte-strided box copy: for every index (i0, …, ik) < extent, run_bytes contiguous bytes from
/// src + Σ i_d·src_stride[d] to dst + Σ i_d·dst_stride[d] (dimensions outer first; an empty
/// extent is one run). Extents >= 0; the runs must not overlap on dst.
struct StridedCopy {
  std::byte* dst;
  const std::byte* src;
  std::span<const int64_t> extent;
  std::span<const int64_t> dst_stride;  // bytes, one per extent
  std::span<const int64_t> src_stride;  // bytes, one per extent
  size_t run_bytes;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  /// "host", "cuda", …
  virtual std::string_view name() const = 0;
  /// A block of `bytes` (> 0), at least 64-byte aligned. std::bad_alloc when there is none.
  virtual std::byte* allocate(size_t bytes) = 0;
  /// Returns a block from allocate(bytes).
  virtual void free(std::byte* block, size_t bytes) = 0;
  virtual void copy_from_host(std::byte* dst, const std::byte* host_src, size_t bytes) = 0;
  virtual void copy_to_host(std::byte* host_dst, const std::byte* src, size_t bytes) = 0;
  /// Between two blocks of this memory (devices of one kind).
  virtual void copy_on_device(std::byte* dst, const std::byte* src, size_t bytes) = 0;
  /// A box copy between two blocks of this memory. ValueError naming the counts if the strides
  /// do not match the extents or an extent is negative.
  virtual void copy_strided(const StridedCopy& copy) = 0;
};

/// The CPU kind's DeviceMemory (host memory); one per process.
DeviceMemory& host_memory();

}  // namespace meshlayout
