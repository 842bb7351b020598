// array_io.h — distributed Arrays to and from safetensors checkpoints, shard by shard.
//
// save_arrays writes one standard safetensors file. The header is computed from replicated
// metadata (names, dtypes, shapes), identically in every process; for each block of each
// tensor one device of the devices holding it (balanced over processes) writes its box
// straight from its shard to the block's byte ranges, with pwritev. The file is written under
// a temporary name in the same directory, flushed (fdatasync), then renamed over `path` and the
// directory flushed: a save that dies part-way leaves the previous checkpoint untouched (and a
// ".<name>.tmp-*" file, safe to delete).
//
// load_arrays fills already allocated Arrays (any layout) from a Checkpoint: each process reads
// only the byte ranges of the boxes its devices hold, each distinct box once, straight into
// the shards. By default (measured fastest, mapped_read.h) the boxes are copied from a
// read-only mmap of the file, with no system call per run even when a box is one short run
// per row (column- or 2-D-sharded), no staging, and a box held by several local devices
// (replicated) read once and copied to every replica chunk by chunk while in cache; preadv
// where it merges a process's short runs into long ones (its devices hold neighbouring
// columns covering whole rows). A
// two-phase read (each process reads a contiguous slab, the slabs are exchanged:
// two_phase_load.h) reads every byte once over all processes; it is chosen by
// LoadOptions::two_phase, or by default for fragmented tensors when mapping is off.
//
// Arrays on GPU devices (one process; their shards are device memory) are saved and loaded
// through a bounded page-locked host staging area instead, the file reads overlapped with the
// host-to-device copies: device_staging.h.
//
// Both are collective over the arrays' runtime: every process calls them with the same list,
// and a failure in one process (I/O, memory) is thrown by all (agree_on_failure).
//
// Example:
//   save_arrays("w.safetensors", {{"dense/kernel", &kernel}, {"dense/bias", &bias}});
//   Checkpoint ckpt = Checkpoint::open("w.safetensors");
//   Array k2 = Array::allocate(TensorLayout({"model", None}, mesh), {64, 256}, DType::kF32);
//   load_arrays(ckpt, {{"dense/kernel", &k2}});     // any saved layout into any layout
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>

#include "meshlayout/array/array.h"
#include "meshlayout/io/mapped_read.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/io/two_phase_load.h"

namespace meshlayout {

/// Progress of a long load or save: (bytes done, bytes total) in this process. Called from
/// worker threads, one call at a time.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

struct NamedArray {
  std::string name;  // the tensor's name in the file
  const Array* array;
};

struct SaveOptions {
  std::map<std::string, std::string> metadata;  // the header's __metadata__
  ProgressFn progress;
  /// Arrays on GPU devices: bytes of page-locked host staging the save holds at once (two
  /// slots of at most 64 MiB: device_staging.h). CPU shards are written in place.
  uint64_t max_staging_bytes = uint64_t{256} << 20;
};

struct SaveReport {
  uint64_t file_bytes = 0;     // size of the file written
  uint64_t bytes_written = 0;  // tensor bytes this process wrote
};

/// Writes `arrays` to `path` as one safetensors file (atomically). Collective. ValueError for
/// an empty, duplicate or NUL-containing name, or arrays on different runtimes; any I/O
/// failure (directory missing, disk full) is thrown in every process and leaves `path` as it
/// was.
SaveReport save_arrays(const std::string& path, std::span<const NamedArray> arrays,
                       const SaveOptions& options = {});

struct LoadTarget {
  std::string name;  // the tensor's name in the checkpoint
  Array* array;      // allocated, any layout; its shards are overwritten
};

struct LoadOptions {
  /// Convert between floating dtypes (F32, F64, BF16, F16) when the file's dtype differs from
  /// the array's; without it a dtype difference is a ValueError naming the tensor.
  bool convert_dtypes = false;
  ProgressFn progress;
  /// Bytes of file-dtype staging a conversion may hold at once (per process); also the bound
  /// of a two-phase load's staging slab (two_phase_load.h).
  uint64_t max_staging_bytes = uint64_t{256} << 20;
  /// Under several processes: read fragmented (column-, 2-D-sharded) tensors two-phase, in
  /// contiguous slabs redistributed over the communicator (kAuto), always, or never.
  TwoPhaseMode two_phase = TwoPhaseMode::kAuto;
  /// Boxes read directly are copied from a read-only mmap of the file (kAlways), read with
  /// preadv (kNever), or (kAuto) mapped except where preadv merges short runs into long ones:
  /// measured fastest per case (mapped_read.h). With map kAuto or kAlways, two_phase kAuto
  /// reads nothing two-phase (mapping measured faster).
  MapMode map = MapMode::kAuto;
};

struct LoadReport {
  uint64_t bytes_read = 0;   // tensor bytes this process read from the files
  uint64_t shard_bytes = 0;  // bytes of this process's distinct boxes, in the file's dtypes
  /// Of shard_bytes, those loaded two-phase: their bytes_read is this process's slabs, not
  /// its boxes (over all processes, each byte of those tensors is read once).
  uint64_t two_phase_bytes = 0;
  /// The two-phase staging slab this process held (0: none); for arrays on GPU devices, the
  /// page-locked staging slots (device_staging.h).
  uint64_t staging_bytes = 0;
  /// Of bytes_read, those copied from a mapping of the file (mapped_read.h).
  uint64_t mapped_bytes = 0;
};

/// Fills every target from `checkpoint`. Collective. Checked on every process before any byte
/// is read: NotFoundError listing the names the checkpoint lacks; ValueError naming the tensor
/// for a shape mismatch, or a dtype mismatch (unless convert_dtypes and both are floating);
/// ValueError for a dtype meshlayout cannot load (U16, F8_*, …).
LoadReport load_arrays(const Checkpoint& checkpoint, std::span<const LoadTarget> targets,
                       const LoadOptions& options = {});

/// Converts `count` elements from `from` to `to` (floating dtypes: F32, F64, BF16, F16; the
/// same dtype copies), rounding to nearest even.
void convert_floats(const std::byte* src, DType from, std::byte* dst, DType to, size_t count);

}  // namespace meshlayout
