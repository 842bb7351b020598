// two_phase_load.h — two-phase checkpoint reads (as MPI-IO collective buffering does): each
// process reads a contiguous slab of a tensor and the slabs are redistributed to the shards
// over the communicator. Internal to load_arrays (array_io.cc).
//
// Why: a column- or 2-D-sharded tensor gives each process one short run per row (2-8 KiB),
// and one pread per run costs ~5 us of system-call overhead on the machines measured (issue
// 15); a process reading whole rows in 16 MiB requests then exchanging the pieces reads every
// byte of the file once over all processes. On one node with the file in the page cache a
// mapped read (mapped_read.h) measured faster (columns 0.85 vs 0.40 of a raw pread, 2-D 0.80
// vs 0.58), so load_arrays maps by default; two-phase is for where each process's reads cost
// (a network filesystem, a cold file read from several nodes): TwoPhaseMode::kAlways, or
// kAuto with MapMode::kNever.
//
// Memory: each process holds one staging slab of at most
//   max(max_staging_bytes, bytes of one dim-0 slice of the tensor)
// bytes (charged to the runtime's staging account) besides the shards themselves.
//
// Example (inside load_arrays):
//   if (wants_two_phase(*array, info, mode)) tensors.push_back({file, &info, array});
//   load_two_phase(tensors, runtime, {.max_staging_bytes = 256 << 20});
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/io/mapped_read.h"
#include "meshlayout/io/safetensors_file.h"

namespace meshlayout {

/// How load_arrays reads tensors under several processes (LoadOptions::two_phase).
enum class TwoPhaseMode {
  kAuto,    // two-phase when some process's boxes are fragmented in the file (short runs)
            // and LoadOptions::map is kNever (else those are mapped)
  kAlways,  // two-phase for every tensor that can (same dtype in file and array, rank >= 1)
  kNever,   // each process reads its boxes directly
};

namespace io_internal {

/// Average contiguous run below which a process's direct reads are "fragmented".
inline constexpr uint64_t kMinDirectRunBytes = uint64_t{256} << 10;
/// Tensors smaller than this are read directly (an exchange costs more than a few reads).
inline constexpr uint64_t kMinTwoPhaseTensorBytes = uint64_t{1} << 20;

/// Whether `array` loads `tensor` two-phase. A pure function of replicated metadata (the
/// array's geometry, the runtime's process count, the file's header), so every process
/// decides alike.
/// Under kAuto, a fragmented tensor is read two-phase only when `map` is kNever (a mapped
/// read of it measured faster, mapped_read.h).
bool wants_two_phase(const Array& array, const TensorInfo& tensor, TwoPhaseMode mode, MapMode map);

struct TwoPhaseTensor {
  const SafetensorsFile* file;
  const TensorInfo* tensor;
  Array* array;
};

struct TwoPhaseOptions {
  uint64_t max_staging_bytes = uint64_t{256} << 20;
  std::function<void(uint64_t)> on_bytes;  // this process's shard bytes as they land
};

struct TwoPhaseReport {
  uint64_t bytes_read = 0;     // bytes this process read from the files
  uint64_t shard_bytes = 0;    // bytes of this process's distinct boxes of these tensors
  uint64_t staging_bytes = 0;  // size of the staging slab this process used
};

/// Loads every tensor two-phase. Collective over `runtime`'s communicator: every process
/// passes the same list. Local replicas of a box are filled by copy.
TwoPhaseReport load_two_phase(std::span<const TwoPhaseTensor> tensors, Runtime& runtime,
                              const TwoPhaseOptions& options);

}  // namespace io_internal
}  // namespace meshlayout
