// mapped_read.h — checkpoint boxes copied straight out of a read-only mmap of the file (as
// safetensors' own loaders do). Internal to load_arrays (array_io.cc).
//
// Why: a column- or 2-D-sharded tensor gives each process one short run per row (2-8 KiB);
// with pread that is one system call per run (5-8 us each here under load), with a mapping
// a memcpy from the page cache, so a fragmented box loads at copy speed without staging and
// without reading a byte it does not hold. A box held by several local devices (replicated
// tensors) is copied from each chunk of the mapping to every replica while the chunk is in
// cache: the file is read once per process, not once per device.
//
// NOTE measured (issue 15; mpirun -np 4 x 2 devices on 2 cores shared with other work,
// 512 MiB of f32 8192x4096, warm page cache; ratio = raw pread of the same bytes / load, best
// of 5, methods interleaved in one run: mpi_checkpoint_bench 512 compare; two runs):
//   case        preadv     two-phase  mapped
//   rows        1.19-1.36  1.06-1.18  1.30-1.63
//   columns     0.19       0.35-0.40  0.72-0.85
//   2-D         0.33-0.37  0.55-0.58  0.67-0.80
//   replicated  0.58-0.67  0.52-0.69  0.75 (memcpy), 0.98 (streaming stores, below)
// In one process of 8 devices (checkpoint_bench, 1 GiB, two runs each): rows warm 1.19-1.34
// preadv vs 1.38-1.73 mapped, cold 0.57-0.78 vs 0.82-1.12; but columns and 2x4, whose 8
// boxes merge into whole rows that one preadv moves, warm 0.74-1.01 / 1.00-1.23 preadv vs
// 0.53-0.86 / 0.73-0.98 mapped. Hence kAuto: mapped, except where preadv merges short runs.
//
// Under heavier contention (load average 7-10 on the 2 cores) the same default load measured
// rows 1.56-2.18, columns 0.50-0.64, 2-D 0.59-0.67, replicated 0.87-0.99 (np 4); columns
// and 2-D pay the page-table work of every page their rows touch (each process maps 1-2 of
// the 4 pages of every 16 KiB row: ~4x the page faults of a row-sharded load of the same
// bytes), which neither grouping the pieces of a row band into one task, nor streaming 2 KiB
// runs, nor madvise (SEQUENTIAL, WILLNEED, POPULATE_READ), nor one thread per process
// improved measurably. Under np 2 (4 devices a process) replicated measured 0.50-0.60: each
// process writes 4 copies (2 GiB) where the baseline writes one (512 MiB); at the baseline's
// own write speed that would be 0.25, so streaming from cache already beats it 2x.
//
// NOTE tried and measured (issue 15, kernel 6.18): single-copy two-phase loads through
// cross-memory attach (bench/mpi_cma_probe.cc, standalone). Each process maps a contiguous
// slab (1/P of the rows) and process_vm_writev's every piece straight into its owner's shard
// (one remote iovec per <= 1024 row runs; addresses allgathered, then a barrier): file read
// once over all processes, nothing staged. CMA works between mpirun ranks here (root). Ratio to
// raw pread (best / median of 7; two runs each), and CPU summed over the processes / raw's:
//                   map:                              CMA write:
//   case            best       median     CPU         best       median     CPU
//   np 4, columns   0.94-0.99  0.99-1.04  1.04-1.06x  0.91-0.92  0.96-1.00  1.04-1.06x
//   np 4, 2-D       1.10-1.14  1.13-1.14  0.95x       0.95-1.04  0.94-1.03  1.00-1.07x
//   np 2, columns   0.96-1.04  0.97-1.00  1.10x       0.87-0.92  0.83       1.20-1.28x
//   np 2, 2-D       1.03-1.15  1.02-1.16  0.99-1.02x  0.95-1.13  0.98-1.15  1.04-1.07x
// (load average 2.4-2.8). Four more runs at load average 2.8-3.5, best ratio map vs CMA write
// (CPU): np 4 columns 0.89-0.94 (1.16-1.18x) vs 0.70-0.82 (1.27-1.30x), 2-D 0.93-1.12 vs
// 0.74-0.85; np 2 columns 0.94-0.96 vs 0.79, 2-D 1.06-1.07 vs 0.92-0.97. Pulling with
// process_vm_readv (remote iovecs one run each) measured 0.28-0.47 for columns; writev from a
// 1 MiB pread staging buffer instead of the mapping 0.61-0.84; MAP_POPULATE on the slab no
// change. The mapping's page-table work is small here: the page cache holds large folios, and
// a column load takes ~400 minor faults a process (getrusage), so a mapped copy already costs
// about what the raw pread costs, and cross-memory attach adds the pinning of the remote
// pages. Not built into load_arrays. Replicated (every device the whole tensor; raw reads one
// copy a process), np 4 x 2 devices, two runs: map (plain memcpy) 0.53, CMA write of each
// process's slab to all 8 devices (the file read once over the node) 0.45, CMA read 0.41-0.42.
//
// NOTE replicated under np 4 x 2 devices is bound by memory bandwidth here: each process
// writes two copies (1 GiB) where the baseline writes one, so the node moves 2 GiB read + 4 GiB
// written against the baseline's 2 + 2. Measured (mpi_checkpoint_bench 512 auto 7 replicated,
// six runs): load 120-129 ms against raw 82-93 ms, i.e. ~50 GB/s of memory traffic in both,
// ratio 0.67-0.76 (0.89 when the raw read ran slow). With streaming stores the copy moves no
// byte it does not have to; what would close the gap is local replicas sharing their pages,
// which device buffers do not (each device owns its memory).
// What did cost: wants_mapped sorting every run's span (11 ms a load for 4 column-sharded
// tensors under np 4, a quarter of the load): now merged_runs counts on merged boxes; auto
// then loads columns as fast as map (np 4: 37.6-45.9 ms vs 46.5 ms best, load average 2.6-5).
//
// Bytes read: a mapped box counts its own bytes (what is copied out of the file), as preadv
// does. The page cache underneath is shared by the processes of a node; on a cold cache the
// kernel fills whole pages and readahead windows around the touched rows, as it does for
// preadv of short runs.
//
// Memory: nothing is allocated besides the mapping's page-table entries; the pages are the
// page cache's (shared, not charged to any account, not a copy of the tensor). The mapping
// covers only the tensors being loaded and is unmapped before read_mapped returns. Peak per
// device: its shards, nothing staged (the staging account stays at 0).
//
// Failure modes: a file that cannot be mapped (mmap fails: ENOMEM, a filesystem without mmap)
// or that is now shorter than its header says is read with preadv instead, so a truncated
// file gives the same DataLossError as without mapping. Limit: a file truncated by another
// program *while* it is being copied raises SIGBUS (as with any mmap reader); checkpoints are
// written to a temporary name and renamed (save_arrays), never truncated in place.
//
// Example (inside load_arrays):
//   std::vector<MappedBox> boxes{{file, &info, shard.box, {shard.buffer.data(), copy.data()}}};
//   read_mapped(boxes, pool, {});
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/io/safetensors_file.h"

namespace meshlayout {

/// How load_arrays reads the boxes it reads directly (not two-phase): LoadOptions::map.
enum class MapMode {
  kAuto,    // mapped, except where preadv merges a process's short runs into long ones
            // (its devices hold neighbouring columns covering whole rows): measured fastest
  kAlways,  // every box of the same dtype in file and array is copied from a mapping
  kNever,   // preadv only
};

namespace io_internal {

/// Whether this process reads its boxes of `array` from a mapping of `tensor`'s file. Under
/// kAuto: yes, unless its boxes are fragmented in the file (runs of under kMinDirectRunBytes
/// on average) but merge into long runs where file-adjacent, and no two of its devices hold
/// the same box. A local choice (no other process depends on it).
bool wants_mapped(const Array& array, const TensorInfo& tensor, MapMode mode);

/// How many contiguous runs of the file `boxes` (disjoint boxes of the tensor `whole`) make
/// once file-adjacent runs are joined, counted on the boxes merged where they tile a larger box
/// (a grid's neighbours, repeatedly): O(boxes log boxes), not O(runs) as sorting every run's
/// span was (11 ms for four 8192-row column-sharded tensors a process, issue 15). Exact for a
/// sharding's boxes except where one box's row ends meet the next's row starts (non-neighbouring
/// boxes, first and last columns): counted as separate runs, an overestimate (only chooses the
/// mapping more often).
uint64_t merged_runs(std::vector<Box> boxes, const Box& whole);

/// One box of one tensor, to land in every buffer of `destinations` (row-major buffers holding
/// `box`: a process's local replicas of it).
struct MappedBox {
  const SafetensorsFile* file;
  const TensorInfo* tensor;
  Box box;
  std::vector<std::byte*> destinations;
};

struct MappedReadReport {
  uint64_t bytes_read = 0;      // bytes taken from the files (each box once, not per replica)
  uint64_t mapped_bytes = 0;    // of those, copied from a mapping
  uint64_t fallback_bytes = 0;  // of those, read with preadv (mapping failed or file shrank)
};

/// Copies every box into its destinations, in parallel on `pool`. Each file is mapped once
/// (the span of its tensors being loaded). Errors as ReadBatch (DataLossError naming the
/// tensor and the offset for a file shorter than its header says).
MappedReadReport read_mapped(std::span<const MappedBox> boxes, ThreadPool& pool,
                             const std::function<void(uint64_t)>& on_bytes);

/// Tests: make every mapping fail (as mmap failing would), to exercise the preadv fallback.
void fail_mappings_for_testing(bool fail);
/// Tests: copy every run with streaming stores (normally only loads writing >= 64 MiB, runs
/// of >= 4 KiB), to check them on small tensors, odd lengths and alignments.
void stream_all_for_testing(bool stream);
/// Tests: stream with stores of `bytes` (16, 32 or 64; 0 restores the widest the CPU has).
/// False, and nothing changed, if the CPU lacks them.
bool stream_width_for_testing(int bytes);

}  // namespace io_internal
}  // namespace meshlayout
