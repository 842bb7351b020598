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
#include <vector>

#include "meshlayout/layout/shard_geometry.h"  // Box

namespace meshlayout {

/// A byte-strided box copy: for every index (i0, …, ik) < extent, run_bytes contiguous bytes from
/// src + Σ i_d·src_stride[d] to dst + Σ i_d·dst_stride[d] (dimensions outer first; an empty
/// extent is one run). Extents >= 0; the runs must not overlap on dst.
/// Which memories a copy joins: a device kind's own blocks, or host memory on one side.
enum class CopyDirection : unsigned char { kDeviceToDevice, kHostToDevice, kDeviceToHost };

struct StridedCopy {
  std::byte* dst;
  const std::byte* src;
  std::span<const int64_t> extent;
  std::span<const int64_t> dst_stride;  // bytes, one per extent
  std::span<const int64_t> src_stride;  // bytes, one per extent
  size_t run_bytes;
  /// Host memory on one side (any host pointer, pageable or not); host_memory() ignores it.
  CopyDirection direction = CopyDirection::kDeviceToDevice;
};

/// Calls fn(dst_offset, src_offset) once per index of the first `dims` dimensions of `copy`'s
/// extent (outer first, the last of them fastest), with the byte offsets of that index on each
/// side; nothing when one of those extents is 0. The walk every kind's copy_strided shares.
template <typename Fn>
void for_each_outer_offset(const StridedCopy& copy, size_t dims, Fn&& fn) {
  int64_t count = 1;
  for (size_t d = 0; d < dims; ++d) count *= copy.extent[d];
  std::vector<int64_t> index(dims, 0);
  int64_t dst = 0, src = 0;
  for (int64_t o = 0; o < count; ++o) {
    fn(dst, src);
    for (size_t d = dims; d-- > 0;) {  // advance, innermost first, keeping the offsets in step
      if (++index[d] < copy.extent[d]) {
        dst += copy.dst_stride[d];
        src += copy.src_stride[d];
        break;
      }
      dst -= (copy.extent[d] - 1) * copy.dst_stride[d];
      src -= (copy.extent[d] - 1) * copy.src_stride[d];
      index[d] = 0;
    }
  }
}

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
  /// Several device-to-device box copies at once (a reshard's pieces): the same as copy_strided
  /// on each, which is what this default does; the CUDA kind runs them as one kernel launch.
  virtual void copy_strided_batch(std::span<const StridedCopy> copies) {
    for (const StridedCopy& c : copies) copy_strided(c);
  }
  /// Waits until every copy and kernel enqueued on this memory's device has finished (the
  /// host's: nothing to wait for).
  virtual void synchronize() {}
  /// Host memory that copies to and from this memory run fastest through (a checkpoint's
  /// staging): page-locked for CUDA (cudaHostAlloc, portable to every GPU), an ordinary block
  /// for host_memory(). A copy_from_host or copy_strided(kHostToDevice) from a staging block may
  /// return before the copy has read it: leave the block unchanged until synchronize(). The CUDA
  /// kind keeps up to 4 freed blocks for reuse (page-locking memory is slow).
  virtual std::byte* allocate_staging(size_t bytes) { return allocate(bytes); }
  /// Returns a block from allocate_staging(bytes).
  virtual void free_staging(std::byte* block, size_t bytes) { free(block, bytes); }
};

/// The CPU kind's DeviceMemory (host memory); one per process.
DeviceMemory& host_memory();

/// The strided copy of the elements of `region` (global coordinates, inside both boxes) from a
/// block holding `src_box` to one holding `dst_box` (row-major, `elem` bytes each), through
/// `memory` (layout/box_ops.h's copy_box for any kind): dimensions that are whole in both boxes
/// merge into longer runs.
void copy_box_through(DeviceMemory& memory, CopyDirection direction, std::byte* dst,
                      const Box& dst_box, const std::byte* src, const Box& src_box,
                      const Box& region, size_t elem);

/// copy_box_through's strided copy, kept for a batch (DeviceMemory::copy_strided_batch): `copy`'s
/// spans point into this object's vectors, so build the batch once the boxes stop moving.
struct BoxCopy {
  std::vector<int64_t> extent, dst_stride, src_stride;
  std::byte* dst;
  const std::byte* src;
  size_t run_bytes;
  CopyDirection direction;
  StridedCopy copy() const {
    return {.dst = dst,
            .src = src,
            .extent = extent,
            .dst_stride = dst_stride,
            .src_stride = src_stride,
            .run_bytes = run_bytes,
            .direction = direction};
  }
};
/// The strided copy copy_box_through would run; nothing is copied. Empty regions give runs of 0.
BoxCopy plan_box_copy(CopyDirection direction, std::byte* dst, const Box& dst_box,
                      const std::byte* src, const Box& src_box, const Box& region, size_t elem);

}  // namespace meshlayout
