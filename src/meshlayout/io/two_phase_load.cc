#include "meshlayout/io/two_phase_load.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/vectored_io.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/runtime/communicator.h"

namespace meshlayout::io_internal {
namespace {

// A distinct box of one process: the first mesh position of that process holding it.
struct Target {
  int process;
  int64_t position;
  Box box;
};

// Every process's distinct non-empty boxes, in mesh order: replicated metadata, so every
// process builds the same list (and so pairs its sends and receives alike).
std::vector<Target> distinct_targets(const Array& array) {
  const ShardGeometry& g = array.geometry();
  const std::vector<int64_t>& ids = g.mesh().device_ids();
  std::vector<Target> out;
  for (size_t p = 0; p < ids.size(); ++p) {
    Box box = g.box(static_cast<int64_t>(p));
    if (box.empty()) continue;
    const int process = array.runtime().process_of(ids[p]);
    const bool seen = std::any_of(out.begin(), out.end(), [&](const Target& t) {
      return t.process == process && t.box == box;
    });
    if (!seen) out.push_back(Target{process, static_cast<int64_t>(p), std::move(box)});
  }
  return out;
}

// Runs `step` here and agrees with the other processes on its failure (DESIGN §4), so that no
// process enters an exchange another one left.
template <typename Step>
void agreed(Communicator& comm, Step&& step) {
  std::exception_ptr error;
  try {
    step();
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_failure(comm, error);
}

// Rows (dim 0 slices) per process and round for `tensor`: as many as fit the staging bound,
// at least one, at most an even share.
int64_t rows_per_round(const TensorInfo& tensor, int processes, uint64_t max_staging_bytes) {
  const int64_t rows = tensor.shape[0];
  const uint64_t row_bytes =
      static_cast<uint64_t>(num_elements(tensor.shape) / rows) * tensor.element_size;
  const int64_t share = (rows + processes - 1) / processes;
  const int64_t fit = static_cast<int64_t>(max_staging_bytes / std::max<uint64_t>(row_bytes, 1));
  return std::clamp<int64_t>(fit, 1, share);
}

// The slab process `q` reads in the round starting at row `r0`.
Box slab(const TensorInfo& tensor, int64_t r0, int64_t rows, int q) {
  Box box{Shape(tensor.shape.size(), 0), tensor.shape};
  const int64_t begin = std::min(r0 + q * rows, tensor.shape[0]);
  box.offset[0] = begin;
  box.shape[0] = std::min(r0 + (q + 1) * rows, tensor.shape[0]) - begin;
  return box;
}

}  // namespace

bool wants_two_phase(const Array& array, const TensorInfo& tensor, TwoPhaseMode mode, MapMode map) {
  if (mode == TwoPhaseMode::kNever || array.runtime().num_processes() < 2) return false;
  // Device shards load through host staging (device_staging.h), one process only.
  if (array.runtime().device_kind() != DeviceKind::kCpu) return false;
  if (tensor.shape.empty() || num_elements(tensor.shape) == 0 || !tensor.dtype ||
      *tensor.dtype != array.dtype()) {
    return false;
  }
  if (mode == TwoPhaseMode::kAlways) return true;
  if (map != MapMode::kNever) return false;
  const uint64_t bytes = static_cast<uint64_t>(num_elements(tensor.shape)) * tensor.element_size;
  if (bytes < kMinTwoPhaseTensorBytes) return false;
  const Box whole{Shape(tensor.shape.size(), 0), tensor.shape};
  for (const Target& t : distinct_targets(array)) {
    const uint64_t runs = static_cast<uint64_t>(count_contiguous_runs(t.box, whole, t.box));
    const uint64_t box_bytes = static_cast<uint64_t>(t.box.num_elements()) * tensor.element_size;
    if (box_bytes < kMinDirectRunBytes * runs) return true;
  }
  return false;
}

TwoPhaseReport load_two_phase(std::span<const TwoPhaseTensor> tensors, Runtime& runtime,
                              const TwoPhaseOptions& options) {
  TwoPhaseReport report;
  if (tensors.empty()) return report;
  Communicator& comm = runtime.comm();
  const int me = comm.rank();
  const int procs = comm.size();
  ThreadPool& pool = runtime.pool();

  // The work in units of one slab set (a tensor's rows [r0, r0 + rows × procs)), grouped into
  // rounds whose slabs fit the staging bound together: one read and one exchange per round.
  struct Unit {
    size_t tensor;
    int64_t r0, rows;
    uint64_t slab_bytes;  // the largest slab of the unit (the same in every process)
  };
  std::vector<std::vector<Target>> targets;
  std::vector<std::vector<Unit>> rounds(1);
  uint64_t round_bytes = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorInfo& info = *tensors[k].tensor;
    targets.push_back(distinct_targets(*tensors[k].array));
    for (const Target& target : targets.back()) {
      if (target.process == me) {
        report.shard_bytes += static_cast<uint64_t>(target.box.num_elements()) * info.element_size;
      }
    }
    const int64_t rows = rows_per_round(info, procs, options.max_staging_bytes);
    const uint64_t slab_bytes =
        static_cast<uint64_t>(num_elements(info.shape) / info.shape[0] * rows) * info.element_size;
    for (int64_t r0 = 0; r0 < info.shape[0]; r0 += rows * procs) {
      if (round_bytes > 0 && round_bytes + slab_bytes > options.max_staging_bytes) {
        rounds.emplace_back();
        round_bytes = 0;
      }
      rounds.back().push_back(Unit{k, r0, rows, slab_bytes});
      round_bytes += slab_bytes;
      report.staging_bytes = std::max(report.staging_bytes, round_bytes);
    }
  }
  DeviceBuffer staging;
  agreed(comm, [&] { staging = DeviceBuffer(runtime.staging(), report.staging_bytes); });

  // Boxes go to the exchange in bytes (the last dim scaled by the element size), so that one
  // exchange carries tensors of different dtypes.
  auto in_bytes = [](Box box, size_t elem) {
    box.offset.back() *= static_cast<int64_t>(elem);
    box.shape.back() *= static_cast<int64_t>(elem);
    return box;
  };
  constexpr int64_t kMaxMessage = int64_t{1} << 30;  // every MPI count fits an int
  for (const std::vector<Unit>& round : rounds) {
    // This process's slabs are read in one pass: the pieces of its own boxes straight into
    // the shards, each other process's pieces packed into a contiguous part of the staging
    // buffer (so both ends of every message are contiguous: one copy).
    std::vector<BoxRegion> sends, recvs;
    uint64_t landed = 0;
    agreed(comm, [&] {
      std::vector<IoPiece> pieces;
      std::byte* packed = staging.data();
      for (const Unit& u : round) {
        const TwoPhaseTensor& t = tensors[u.tensor];
        const TensorInfo& info = *t.tensor;
        const size_t elem = info.element_size;
        const Box mine = slab(info, u.r0, u.rows, me);
        if (mine.empty()) continue;
        const Box whole{Shape(info.shape.size(), 0), info.shape};
        const uint64_t base = t.file->header().data_start() + info.begin;
        // Processes holding the same box (replicas across processes) get the same packed
        // piece: boxes of one layout are equal or disjoint, so the packed pieces of a slab fit
        // in the slab's bytes.
        std::vector<std::pair<Box, std::byte*>> packed_pieces;
        for (const Target& target : targets[u.tensor]) {
          std::optional<Box> piece = intersect(mine, target.box);
          if (!piece || piece->empty()) continue;
          auto same = std::find_if(packed_pieces.begin(), packed_pieces.end(),
                                   [&](const auto& p) { return p.first == *piece; });
          if (target.process != me && same != packed_pieces.end()) {
            const Box bytes = in_bytes(*piece, elem);
            for (Box& part : split_box(bytes, kMaxMessage)) {
              sends.push_back(BoxRegion{target.process, same->second, bytes, std::move(part)});
            }
            continue;
          }
          Array::Shard* shard = target.process == me ? t.array->shard_at(target.position) : nullptr;
          const size_t piece_bytes = static_cast<size_t>(piece->num_elements()) * elem;
          if (shard == nullptr && packed + piece_bytes > staging.data() + staging.size()) {
            throw InternalError(
                fmt::format("two-phase load of '{}': the packed pieces overflow "
                            "the {}-byte staging slab",
                            info.name, staging.size()));
          }
          std::byte* memory = shard != nullptr ? shard->buffer.data() : packed;
          const Box& memory_box = shard != nullptr ? shard->box : *piece;
          pieces.reserve(pieces.size() +
                         static_cast<size_t>(count_contiguous_runs(memory_box, whole, *piece)));
          for_each_contiguous_run(
              memory_box, whole, *piece, elem, [&](size_t mem_off, size_t file_off, size_t bytes) {
                pieces.push_back(IoPiece{t.file->fd(), base + file_off, memory + mem_off, bytes,
                                         info.name, t.file->path()});
              });
          if (shard != nullptr) {
            landed += static_cast<uint64_t>(piece->num_elements()) * elem;
            continue;
          }
          const Box bytes = in_bytes(*piece, elem);
          for (Box& part : split_box(bytes, kMaxMessage)) {
            sends.push_back(BoxRegion{target.process, packed, bytes, std::move(part)});
          }
          packed_pieces.emplace_back(*piece, packed);
          packed += piece_bytes;
        }
        const uint64_t bytes = static_cast<uint64_t>(mine.num_elements()) * elem;
        t.file->count_read(bytes);
        report.bytes_read += bytes;
      }
      run_vectored_io(pieces, IoDirection::kRead, {.pool = &pool});
    });
    // What the other processes' slabs hold for this process's boxes. Both sides of each pair
    // of processes list their pieces in the same order: unit, then target.
    for (const Unit& u : round) {
      const TwoPhaseTensor& t = tensors[u.tensor];
      const size_t elem = t.tensor->element_size;
      for (int q = 0; q < procs; ++q) {
        const Box from = slab(*t.tensor, u.r0, u.rows, q);
        if (q == me || from.empty()) continue;
        for (const Target& target : targets[u.tensor]) {
          if (target.process != me) continue;
          std::optional<Box> piece = intersect(from, target.box);
          if (!piece || piece->empty()) continue;
          landed += static_cast<uint64_t>(piece->num_elements()) * elem;
          Array::Shard* shard = t.array->shard_at(target.position);
          const Box shard_bytes = in_bytes(shard->box, elem);
          for (Box& part : split_box(in_bytes(*piece, elem), kMaxMessage)) {
            recvs.push_back(BoxRegion{q, shard->buffer.data(), shard_bytes, std::move(part)});
          }
        }
      }
    }
    comm.exchange_boxes(sends, recvs, 1);
    if (options.on_bytes && landed > 0) options.on_bytes(landed);
  }

  // Local replicas of a distinct box take a copy of it.
  std::vector<std::pair<const Array::Shard*, Array::Shard*>> copies;
  for (size_t k = 0; k < tensors.size(); ++k) {
    Array& array = *tensors[k].array;
    for (Array::Shard& shard : array.local_shards()) {
      if (shard.box.empty()) continue;
      for (const Target& target : targets[k]) {
        if (target.process == me && target.box == shard.box && target.position != shard.position) {
          copies.emplace_back(array.shard_at(target.position), &shard);
        }
      }
    }
  }
  pool.parallel_for(copies.size(), [&](size_t i) {
    std::memcpy(copies[i].second->buffer.data(), copies[i].first->buffer.data(),
                copies[i].first->buffer.size());
  });
  return report;
}

}  // namespace meshlayout::io_internal
