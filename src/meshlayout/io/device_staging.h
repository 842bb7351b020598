// device_staging.h — checkpoint loads and saves of arrays whose shards live in device memory
// (GPU devices: each shard's buffer.data() is a device pointer the host never dereferences),
// through a bounded host staging area. Internal to load_arrays and save_arrays (array_io.cc);
// the CPU kind never comes here (its shards are read and written in place, as before).
//
// Load: every distinct box is cut into pieces contiguous in the shard (split_box: whole rows of
// the box, or runs of one row when a row is larger than a staging slot; a tensor loaded as n
// distinct boxes in pieces of at most 1/n of a slot), and the pieces, in file order, are packed
// into two slots of page-locked host memory (DeviceMemory::allocate_staging: cudaHostAlloc for
// CUDA) of
//   min(max_staging_bytes / 2, 64 MiB)
// bytes each. The file bytes of slot i+1 are read (copied from a mapping of the file,
// mapped_read.h; preadv under MapMode::kNever) while slot i's host-to-device copies run
// (asynchronous from page-locked memory); before slot i+1's copies are enqueued, the devices'
// streams are synchronized, which waits only for slot i's copies (the reads of slot i+2 go into
// slot i's memory). A box held by several devices of one memory (virtual devices of one physical
// GPU) is uploaded once and copied on the device to the others; a device of another memory gets its
// own upload. Dtype conversions read the file's bytes into a pageable buffer of the slot's size and
// convert into the slot (convert_floats). io/ stays free of CUDA: everything goes through
// DeviceMemory.
//
// Save: each box a device writes is cut the same way; slot i+1 is copied from the device
// (copy_to_host: returns when the bytes are on the host) while slot i is written with pwritev on
// another thread, the same atomic temporary-file-and-rename as CPU saves (array_io.h).
//
// Memory: 2 slots of page-locked memory (charged to the runtime's staging account while held; the
// CUDA kind keeps freed blocks for the next load), plus one pageable slot when a
// dtype converts. Nothing is the size of a tensor.
//
// NOTE measured (issue 26, H100 80GB HBM3, 16 cores; bench/gpu_checkpoint_bench: 8 F32 tensors of
// 8192 x 8192, 2 GiB, median of 3; ratio = the faster of pread into one page-locked 256 MiB buffer
// (one thread, or 16 MiB requests over the pool) + cudaMemcpy per tensor / load):
//   warm: 1 device 1.74-1.87, rows over 8 virtual devices 1.81, columns 1.82-1.86, 2x4 1.84-1.85,
//         replicated over 8 1.55-1.58 (~39 GB/s against the raw path's 22); preadv instead of
//         the mapping (MapMode::kNever) 0.76-0.79;
//   cold (posix_fadvise DONTNEED before each run; the disk gives 1.5-1.9 GB/s, runs vary ±20%):
//         0.79-1.01 over the cases; columns and 2x4 were 0.77/0.74 before the pieces were read in
//         file order, 0.88/0.87 after;
//   save from rows over 8: 0.98-1.10 of cudaMemcpy to page-locked memory + pwrite + fdatasync.
//
// Example (inside load_arrays):
//   std::vector<DeviceBox> boxes{{file, &info, DType::kF32, shard.box, false, {{&mem, ptr}}}};
//   load_to_device(boxes, runtime.pool(), runtime.staging(), {.max_staging_bytes = 256 << 20});
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/io/safetensors_file.h"

namespace meshlayout {

class DeviceMemory;

namespace io_internal {

/// Whether `runtime`'s shards live in memory the host cannot address (any kind but the CPU's).
bool on_device(const Runtime& runtime);

/// The DeviceMemory holding `shard` (its device's).
DeviceMemory& memory_of(Runtime& runtime, const Array::Shard& shard);

/// One device block holding a box (row-major).
struct DeviceBlock {
  DeviceMemory* memory;
  std::byte* data;
};

/// One distinct box of one tensor, to land in every block of `destinations` (local replicas).
struct DeviceBox {
  const SafetensorsFile* file;
  const TensorInfo* tensor;
  DType dtype;  // the array's (converted from the file's when they differ)
  Box box;
  bool mapped;  // copied from a mapping of the file, else preadv
  std::vector<DeviceBlock> destinations;
};

struct DeviceStagingOptions {
  uint64_t max_staging_bytes = uint64_t{256} << 20;  // both slots together (LoadOptions')
  std::function<void(uint64_t)> on_bytes;            // bytes as they land (or are written)
};

struct DeviceLoadReport {
  uint64_t bytes_read = 0;     // file bytes read (each box once)
  uint64_t mapped_bytes = 0;   // of those, copied from a mapping
  uint64_t staging_bytes = 0;  // page-locked staging held (both slots)
};

/// Reads every box into its device blocks; returns when every copy has landed. Errors as
/// ReadBatch and read_mapped (DataLossError naming the tensor for a short file).
DeviceLoadReport load_to_device(std::span<const DeviceBox> boxes, ThreadPool& pool,
                                MemoryAccount& staging, const DeviceStagingOptions& options);

/// One box a device writes: its bytes at `data` (row-major, `box`) in `memory`.
struct DeviceWrite {
  const TensorInfo* tensor;
  uint64_t base;  // the tensor's first byte in the file
  Box box;
  DeviceMemory* memory;
  const std::byte* data;
};

/// Writes every box to `fd` (the file `path`) through staging; returns the bytes written.
uint64_t save_from_device(int fd, const std::string& path, std::span<const DeviceWrite> writes,
                          ThreadPool& pool, MemoryAccount& staging,
                          const DeviceStagingOptions& options);

}  // namespace io_internal
}  // namespace meshlayout
