// device_staging.cc — see device_staging.h.
#include "meshlayout/io/device_staging.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <map>
#include <tuple>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/mapped_read.h"
#include "meshlayout/io/vectored_io.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/runtime/device_memory.h"
#include "meshlayout/runtime/thread_pool.h"

namespace meshlayout::io_internal {
namespace {

// One staging slot at most: large enough that a slot's reads spread over the pool's threads in
// 16 MiB requests and its copies run at the link's speed, small enough that the last slot's
// copy (not overlapped with a read) is a small part of a large load.
constexpr uint64_t kMaxSlotBytes = uint64_t{64} << 20;
constexpr uint64_t kMinSlotBytes = 64;  // the largest element, whatever max_staging_bytes says
constexpr size_t kPieceAlign = 256;     // pieces start on cache-line and DMA-friendly bounds
constexpr int64_t kConvertTaskElements = int64_t{1} << 20;

size_t slot_bytes(uint64_t max_staging_bytes) {
  return static_cast<size_t>(std::clamp(max_staging_bytes / 2, kMinSlotBytes, kMaxSlotBytes));
}

// Two page-locked slots from `memory`, charged to `account` while held.
class StagingSlots {
 public:
  StagingSlots(DeviceMemory& memory, MemoryAccount& account, size_t bytes)
      : memory_(memory), account_(account), bytes_(bytes) {
    slots_[0] = memory_.allocate_staging(bytes_);
    try {
      slots_[1] = memory_.allocate_staging(bytes_);
    } catch (...) {
      memory_.free_staging(slots_[0], bytes_);
      throw;
    }
    account_.charge(static_cast<int64_t>(2 * bytes_));
  }
  ~StagingSlots() {
    for (std::byte* s : slots_) memory_.free_staging(s, bytes_);
    account_.release(static_cast<int64_t>(2 * bytes_));
  }
  StagingSlots(const StagingSlots&) = delete;
  StagingSlots& operator=(const StagingSlots&) = delete;

  std::byte* operator[](size_t i) const { return slots_[i % 2]; }

 private:
  DeviceMemory& memory_;
  MemoryAccount& account_;
  size_t bytes_;
  std::byte* slots_[2] = {nullptr, nullptr};
};

// A part of a box contiguous in its row-major buffer, and where it sits in a slot.
struct Piece {
  size_t item;         // index of the box (load) or write (save)
  Box part;            // inside the item's box
  size_t slot_offset;  // bytes
  size_t item_offset;  // bytes into the item's buffer (the array's dtype)
};

// A piece before packing: its footprint in a slot and where its bytes start in the file.
struct Cut {
  Piece piece;
  size_t bytes;
  uintptr_t file;  // orders pieces by file (any fixed order)
  uint64_t file_offset;
};

// Cuts every item's box into pieces of at most `max_elements(item)` elements (split_box: each
// contiguous in the item's buffer) taking `footprint(item)` bytes an element in a slot.
template <typename Items, typename MaxElements, typename Footprint, typename ElementSize>
std::vector<Cut> cut_items(const Items& items, MaxElements max_elements, Footprint footprint,
                           ElementSize element_size) {
  std::vector<Cut> cuts;
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t foot = footprint(items[i]);
    const size_t elem = element_size(items[i]);
    size_t item_offset = 0;
    for (Box& part : split_box(items[i].box, max_elements(items[i]))) {
      const size_t elements = static_cast<size_t>(part.num_elements());
      cuts.push_back(Cut{Piece{i, std::move(part), 0, item_offset}, elements * foot, 0, 0});
      item_offset += elements * elem;
    }
  }
  return cuts;
}

// Packs the pieces in order into slot fills ("groups") of at most `slot` bytes.
std::vector<std::vector<Piece>> pack(std::vector<Cut> cuts, size_t slot) {
  std::vector<std::vector<Piece>> groups;
  size_t used = slot;  // forces a first group
  for (Cut& c : cuts) {
    if (used + c.bytes > slot) {
      groups.emplace_back();
      used = 0;
    }
    c.piece.slot_offset = used;
    groups.back().push_back(std::move(c.piece));
    used = (used + c.bytes + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
  }
  return groups;
}

// Byte offset of `box`'s first element in a row-major tensor of `shape`.
uint64_t first_element_offset(const Box& box, const Shape& shape, size_t elem) {
  uint64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    index = index * static_cast<uint64_t>(shape[d]) + static_cast<uint64_t>(box.offset[d]);
  }
  return index * elem;
}

// Waits for the copies enqueued on `memories` (each once) and forgets them.
void wait_for(std::vector<DeviceMemory*>& memories) {
  for (DeviceMemory* m : memories) m->synchronize();
  memories.clear();
}

}  // namespace

bool on_device(const Runtime& runtime) { return runtime.device_kind() != DeviceKind::kCpu; }

DeviceMemory& memory_of(Runtime& runtime, const Array::Shard& shard) {
  return runtime.device(shard.device_id).memory().device_memory();
}

DeviceLoadReport load_to_device(std::span<const DeviceBox> boxes, ThreadPool& pool,
                                MemoryAccount& staging, const DeviceStagingOptions& options) {
  DeviceLoadReport report;
  if (boxes.empty()) return report;
  const size_t slot = slot_bytes(options.max_staging_bytes);
  const auto file_dtype = [](const DeviceBox& b) { return *b.tensor->dtype; };
  const auto footprint = [](const DeviceBox& b) {
    return std::max(b.tensor->element_size, dtype_size(b.dtype));
  };
  // Slot fills follow the file: each box of a tensor held as n distinct boxes is cut into
  // pieces of at most 1/n of a slot, and the pieces are read in file order, so that a fill of
  // column- or 2-D-sharded boxes covers a band of whole rows (one contiguous stretch of the
  // file: sequential on a cold read) rather than one box's column over every row.
  std::map<const TensorInfo*, int64_t> boxes_of;
  for (const DeviceBox& b : boxes) ++boxes_of[b.tensor];
  std::vector<Cut> cuts = cut_items(
      boxes,
      [&](const DeviceBox& b) {
        return static_cast<int64_t>(slot / footprint(b)) / boxes_of[b.tensor];
      },
      footprint, [](const DeviceBox& b) { return dtype_size(b.dtype); });
  for (Cut& c : cuts) {
    const DeviceBox& b = boxes[c.piece.item];
    c.file = reinterpret_cast<uintptr_t>(b.file);
    c.file_offset = b.file->header().data_start() + b.tensor->begin +
                    first_element_offset(c.piece.part, b.tensor->shape, b.tensor->element_size);
  }
  std::stable_sort(cuts.begin(), cuts.end(), [](const Cut& x, const Cut& y) {
    return std::tie(x.file, x.file_offset) < std::tie(y.file, y.file_offset);
  });
  const std::vector<std::vector<Piece>> groups = pack(std::move(cuts), slot);
  const bool converts = std::any_of(boxes.begin(), boxes.end(),
                                    [&](const DeviceBox& b) { return file_dtype(b) != b.dtype; });

  StagingSlots slots(*boxes.front().destinations.front().memory, staging, slot);
  report.staging_bytes = 2 * slot;
  DeviceBuffer file_bytes;  // the file's bytes of converted pieces, at their slot offsets
  if (converts) file_bytes = DeviceBuffer(staging, slot);

  std::vector<DeviceMemory*> in_flight;  // memories with copies from the other slot enqueued
  try {
    for (size_t g = 0; g < groups.size(); ++g) {
      std::byte* const fill = slots[g];
      // Read this group while the previous group's copies run.
      ReadBatch batch;
      std::vector<MappedBox> mapped;
      struct ConvertTask {
        const Piece* piece;
        int64_t first, count;  // elements of the piece
      };
      std::vector<ConvertTask> converts_now;
      for (const Piece& p : groups[g]) {
        const DeviceBox& b = boxes[p.item];
        const bool convert = file_dtype(b) != b.dtype;
        std::byte* into = (convert ? file_bytes.data() : fill) + p.slot_offset;
        if (b.mapped) {
          mapped.push_back(MappedBox{b.file, b.tensor, p.part, {into}});
        } else {
          batch.add(*b.file, *b.tensor, p.part, into);
        }
        if (!convert) continue;
        const int64_t n = p.part.num_elements();
        for (int64_t first = 0; first < n; first += kConvertTaskElements) {
          converts_now.push_back({&p, first, std::min(kConvertTaskElements, n - first)});
        }
      }
      report.bytes_read += batch.bytes();
      batch.run({.pool = &pool, .on_bytes = options.on_bytes});
      const MappedReadReport m = read_mapped(mapped, pool, options.on_bytes);
      report.bytes_read += m.bytes_read;
      report.mapped_bytes += m.mapped_bytes;
      pool.parallel_for(converts_now.size(), [&](size_t i) {
        const ConvertTask& t = converts_now[i];
        const DeviceBox& b = boxes[t.piece->item];
        const size_t from = b.tensor->element_size, to = dtype_size(b.dtype);
        convert_floats(
            file_bytes.data() + t.piece->slot_offset + static_cast<size_t>(t.first) * from,
            file_dtype(b), fill + t.piece->slot_offset + static_cast<size_t>(t.first) * to, b.dtype,
            static_cast<size_t>(t.count));
      });
      // The other slot's copies are done (its memory is next group's); enqueue this one's.
      wait_for(in_flight);
      for (const Piece& p : groups[g]) {
        const DeviceBox& b = boxes[p.item];
        const size_t bytes = static_cast<size_t>(p.part.num_elements()) * dtype_size(b.dtype);
        std::vector<const DeviceBlock*> uploaded;  // one per memory
        for (const DeviceBlock& d : b.destinations) {
          auto same = std::find_if(uploaded.begin(), uploaded.end(),
                                   [&](const DeviceBlock* u) { return u->memory == d.memory; });
          if (same != uploaded.end()) {
            d.memory->copy_on_device(d.data + p.item_offset, (*same)->data + p.item_offset, bytes);
            continue;
          }
          d.memory->copy_from_host(d.data + p.item_offset, fill + p.slot_offset, bytes);
          uploaded.push_back(&d);
          if (std::find(in_flight.begin(), in_flight.end(), d.memory) == in_flight.end()) {
            in_flight.push_back(d.memory);
          }
        }
      }
    }
    wait_for(in_flight);
  } catch (...) {
    // No copy may still read a slot once it is freed.
    for (DeviceMemory* m : in_flight) {
      try {
        m->synchronize();
      } catch (...) {
      }
    }
    throw;
  }
  return report;
}

uint64_t save_from_device(int fd, const std::string& path, std::span<const DeviceWrite> writes,
                          ThreadPool& pool, MemoryAccount& staging,
                          const DeviceStagingOptions& options) {
  if (writes.empty()) return 0;
  const size_t slot = slot_bytes(options.max_staging_bytes);
  const auto elem = [](const DeviceWrite& w) { return w.tensor->element_size; };
  const std::vector<std::vector<Piece>> groups =
      pack(cut_items(
               writes, [&](const DeviceWrite& w) { return static_cast<int64_t>(slot / elem(w)); },
               elem, elem),
           slot);

  StagingSlots slots(*writes.front().memory, staging, slot);
  uint64_t written = 0;
  std::future<void> writing;  // the previous group's pwritev (declared after the slots: a
                              // failure waits for it before the slots are freed)
  for (size_t g = 0; g < groups.size(); ++g) {
    std::byte* const fill = slots[g];
    std::vector<IoPiece> pieces;
    for (const Piece& p : groups[g]) {
      const DeviceWrite& w = writes[p.item];
      const size_t e = w.tensor->element_size;
      w.memory->copy_to_host(fill + p.slot_offset, w.data + p.item_offset,
                             static_cast<size_t>(p.part.num_elements()) * e);
      const Box whole{Shape(w.tensor->shape.size(), 0), w.tensor->shape};
      for_each_contiguous_run(
          p.part, whole, p.part, e, [&](size_t mem_off, size_t file_off, size_t bytes) {
            pieces.push_back(IoPiece{fd, w.base + file_off, fill + p.slot_offset + mem_off, bytes,
                                     w.tensor->name, path});
            written += bytes;
          });
    }
    if (writing.valid()) writing.get();  // frees the slot the next group fills
    writing = std::async(std::launch::async, [&pool, &options,
                                              pieces = std::move(pieces)]() mutable {
      run_vectored_io(pieces, IoDirection::kWrite, {.pool = &pool, .on_bytes = options.on_bytes});
    });
  }
  if (writing.valid()) writing.get();
  return written;
}

}  // namespace meshlayout::io_internal
