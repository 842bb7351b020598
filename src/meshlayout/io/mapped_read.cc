#include "meshlayout/io/mapped_read.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>

#include "meshlayout/io/two_phase_load.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/runtime/thread_pool.h"

namespace meshlayout::io_internal {
namespace {

std::atomic<bool> fail_mappings{false};
std::atomic<bool> stream_all{false};
std::atomic<int> stream_width{0};  // bytes a streaming store writes; 0: the widest the CPU has

// Box bytes one task copies: small enough to spread a box over the pool's threads and to
// stay in L2 while it is copied to every replica, large enough that a task is not overhead.
constexpr uint64_t kTaskBytes = uint64_t{512} << 10;
// Loads writing at least this much use streaming stores, for runs of at least kStreamMinRunBytes
// (whole cache lines but for a head and a tail). NOTE measured (issue 15, np 4 x 2 devices,
// columns: a 2 KiB run a row and device; mpi_checkpoint_bench 512 auto, three A/B runs): with
// a 4 KiB minimum those runs were memcpy'd (each destination line read before it is written):
// load 32.0-32.7 ms, ratio 0.81-0.86; streamed: 27.4-29.7 ms, 0.97-1.23.
constexpr uint64_t kStreamMinBytes = uint64_t{64} << 20;
constexpr size_t kStreamMinRunBytes = 512;
// Runs up to this long are prefetched kPrefetchRuns runs before they are copied. A column- or
// 2-D-sharded box is one short run per row, each on other pages than the last: the hardware
// prefetchers, which stop at page boundaries, start every run cold. NOTE measured (issue 15,
// standalone copy of a process's 2 x 2 KiB columns of 4 tensors of 8192 x 16 KiB rows out of a
// mapping, warm page cache, against a pread of the same bytes): alone 0.71-0.73 -> 0.88-0.90;
// four such processes at once 0.62-0.83 -> 0.82-0.91. Longer runs: the prefetchers keep up.
// How far ahead: mpi_checkpoint_bench 512 auto 10 columns (np 4, 2 KiB runs), two runs, best /
// median load ms: none 26.4/32.4, 23.2/23.5; 1 run ahead 23.0/25.2, 21.6/22.6; 2 runs
// 21.9/23.1, 21.5/22.7; 4 runs 21.9/22.8, 21.5/22.6; 8 runs 21.9/24.1, 22.2/24.1.
constexpr size_t kPrefetchMaxRunBytes = size_t{16} << 10;
constexpr size_t kPrefetchRuns = 2;

struct Run {
  size_t mem_off, file_off, bytes;
};

// Asks for the cache lines of [p, p + n) ahead of their use (a hint: never faults).
void prefetch(const std::byte* p, size_t n) {
  for (size_t i = 0; i < n; i += 64) __builtin_prefetch(p + i, 0, 3);
}

// A read-only mapping of file bytes [begin, end) (page-aligned inside), unmapped on
// destruction.
class FileMapping {
 public:
  FileMapping() = default;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping() {
    if (base_ != nullptr) ::munmap(base_, length_);
  }
  // False (and nothing mapped) if the file is now shorter than `end` or mmap fails.
  bool map(int fd, uint64_t begin, uint64_t end) {
    if (fail_mappings.load() || end <= begin) return false;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < end) return false;
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    offset_ = begin - begin % page;
    length_ = static_cast<size_t>(end - offset_);
    void* p = ::mmap(nullptr, length_, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(offset_));
    if (p == MAP_FAILED) return false;
    base_ = static_cast<std::byte*>(p);
    return true;
  }
  // The mapped byte at file offset `offset`.
  const std::byte* at(uint64_t offset) const { return base_ + (offset - offset_); }

 private:
  std::byte* base_ = nullptr;
  size_t length_ = 0;
  uint64_t offset_ = 0;
};

uint64_t box_bytes(const MappedBox& b) {
  return static_cast<uint64_t>(b.box.num_elements()) * b.tensor->element_size;
}

#if defined(__x86_64__)
// The copy loops of stream_copy, 64 bytes an iteration, `dst` 64-byte aligned, n a multiple of
// 64: one per store width, chosen at run time (the build targets baseline x86-64).
__attribute__((target("avx512f"))) void stream_64(std::byte* dst, const std::byte* src, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  }
}
__attribute__((target("avx"))) void stream_32(std::byte* dst, const std::byte* src, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
  }
}
void stream_16(std::byte* dst, const std::byte* src, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
}
using StreamLoop = void (*)(std::byte*, const std::byte*, size_t);
// The loop storing `width` bytes at a time (0: the widest the CPU has), or null if the CPU
// lacks those stores.
StreamLoop stream_loop(int width) {
  __builtin_cpu_init();
  const bool has64 = __builtin_cpu_supports("avx512f"), has32 = __builtin_cpu_supports("avx");
  if (width == 64 || (width == 0 && has64)) return has64 ? stream_64 : nullptr;
  if (width == 32 || (width == 0 && has32)) return has32 ? stream_32 : nullptr;
  return stream_16;
}
#endif

// Copies n bytes with non-temporal (streaming) stores where the CPU has them: the destination
// is not read into the cache first (no read-for-ownership) and the copy does not evict the
// source. NOTE measured (mpi_checkpoint_bench, np 4, replicated, 3 runs each): ratio
// 0.63-0.83 with memcpy, 0.92-0.97 streaming; np 2 (4 replicas) 0.46-0.51 vs 0.57-0.63. The
// widest stores the CPU has: NOTE measured (issue 15, standalone, 512 MiB from a mapping to two
// buffers against one pread of it, two runs): 16-byte stores 0.78-0.79, 32-byte 0.79-0.81,
// 64-byte 0.81-0.84.
void stream_copy(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  static const StreamLoop widest = stream_loop(0);
  const int forced = stream_width.load(std::memory_order_relaxed);
  const StreamLoop loop = forced == 0 ? widest : stream_loop(forced);
  const size_t head = std::min<size_t>((64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64, n);
  std::memcpy(dst, src, head);
  const size_t body = (n - head) / 64 * 64;
  loop(dst + head, src + head, body);
  std::memcpy(dst + head + body, src + head + body, n - head - body);
#else
  std::memcpy(dst, src, n);
#endif
}

// Orders this thread's streaming stores before what follows (the pool's hand-over).
void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Whether `b` continues `a` along dimension `d` (equal in every other one); if so `a` becomes
// their union.
bool extend_along(Box& a, const Box& b, size_t d) {
  for (size_t e = 0; e < a.shape.size(); ++e) {
    if (e != d && (a.offset[e] != b.offset[e] || a.shape[e] != b.shape[e])) return false;
  }
  if (a.offset[d] + a.shape[d] != b.offset[d]) return false;
  a.shape[d] += b.shape[d];
  return true;
}

}  // namespace

uint64_t merged_runs(std::vector<Box> boxes, const Box& whole) {
  const size_t rank = whole.shape.size();
  for (bool merged = true; merged;) {
    merged = false;
    for (size_t d = rank; d-- > 0;) {  // innermost first: a grid's rows of boxes, then those
      std::sort(boxes.begin(), boxes.end(), [d](const Box& a, const Box& b) {
        for (size_t e = 0; e < a.shape.size(); ++e) {
          if (e == d) continue;
          if (a.offset[e] != b.offset[e]) return a.offset[e] < b.offset[e];
          if (a.shape[e] != b.shape[e]) return a.shape[e] < b.shape[e];
        }
        return a.offset[d] < b.offset[d];
      });
      std::vector<Box> kept;
      for (Box& box : boxes) {
        if (!kept.empty() && extend_along(kept.back(), box, d)) {
          merged = true;
        } else {
          kept.push_back(std::move(box));
        }
      }
      boxes = std::move(kept);
    }
  }
  uint64_t runs = 0;
  for (const Box& box : boxes) {
    runs += static_cast<uint64_t>(count_contiguous_runs(box, whole, box));
  }
  return runs;
}

void fail_mappings_for_testing(bool fail) { fail_mappings.store(fail); }
void stream_all_for_testing(bool stream) { stream_all.store(stream); }

bool stream_width_for_testing(int bytes) {
#if defined(__x86_64__)
  if (bytes != 0 && stream_loop(bytes) == nullptr) return false;
  stream_width.store(bytes);
  return true;
#else
  return bytes == 0;
#endif
}

bool wants_mapped(const Array& array, const TensorInfo& tensor, MapMode mode) {
  if (mode == MapMode::kNever || num_elements(tensor.shape) == 0 || !tensor.dtype ||
      *tensor.dtype != array.dtype()) {
    return false;
  }
  if (mode == MapMode::kAlways) return true;
  // This process's distinct boxes; a box on two local devices is a local replica.
  std::vector<Box> boxes;
  for (const Array::Shard& shard : array.local_shards()) {
    if (shard.box.empty()) continue;
    if (std::find(boxes.begin(), boxes.end(), shard.box) != boxes.end()) return true;
    boxes.push_back(shard.box);
  }
  // preadv only where it merges this process's short runs into long ones (neighbouring devices
  // of one process covering whole rows): one request moves them all.
  const Box whole{Shape(tensor.shape.size(), 0), tensor.shape};
  uint64_t bytes = 0, runs = 0;
  for (const Box& box : boxes) {
    bytes += static_cast<uint64_t>(box.num_elements()) * tensor.element_size;
    runs += static_cast<uint64_t>(count_contiguous_runs(box, whole, box));
  }
  if (runs <= 1 || bytes >= kMinDirectRunBytes * runs) return true;  // long runs: mapped
  return bytes < kMinDirectRunBytes * merged_runs(std::move(boxes), whole);
}

MappedReadReport read_mapped(std::span<const MappedBox> boxes, ThreadPool& pool,
                             const std::function<void(uint64_t)>& on_bytes) {
  MappedReadReport report;
  // Each file's span of the tensors being loaded; then its mapping, if it can be made.
  std::map<const SafetensorsFile*, std::pair<uint64_t, uint64_t>> spans;
  for (const MappedBox& b : boxes) {
    if (b.box.empty()) continue;
    const uint64_t begin = b.file->header().data_start() + b.tensor->begin;
    const uint64_t end = b.file->header().data_start() + b.tensor->end;
    auto [it, fresh] = spans.try_emplace(b.file, begin, end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, begin);
      it->second.second = std::max(it->second.second, end);
    }
  }
  std::map<const SafetensorsFile*, FileMapping> mappings;
  ReadBatch fallback;
  std::vector<const MappedBox*> fallen;  // boxes read with preadv, copied to replicas after
  for (const auto& [file, span] : spans) {
    if (!mappings[file].map(file->fd(), span.first, span.second)) mappings.erase(file);
  }

  // Tasks: pieces of the mapped boxes of about kTaskBytes, in file order within each box.
  struct Task {
    const MappedBox* box;
    const FileMapping* mapping;
    Box piece;
  };
  std::vector<Task> tasks;
  for (const MappedBox& b : boxes) {
    if (b.box.empty() || b.destinations.empty()) continue;
    const uint64_t bytes = box_bytes(b);
    report.bytes_read += bytes;
    auto m = mappings.find(b.file);
    if (m == mappings.end()) {
      fallback.add(*b.file, *b.tensor, b.box, b.destinations.front());
      fallen.push_back(&b);
      report.fallback_bytes += bytes;
      continue;
    }
    b.file->count_read(bytes);
    report.mapped_bytes += bytes;
    const int64_t elements = static_cast<int64_t>(kTaskBytes / b.tensor->element_size);
    for (Box& piece : split_box(b.box, elements)) {
      tasks.push_back(Task{&b, &m->second, std::move(piece)});
    }
  }
  // Streaming stores when the load writes much more than the caches hold (its destinations
  // would be evicted before use anyway), for runs long enough to fill whole cache lines.
  uint64_t written = 0;
  for (const MappedBox& b : boxes) written += box_bytes(b) * b.destinations.size();
  const bool stream = written >= kStreamMinBytes || stream_all.load();
  const size_t min_run = stream_all.load() ? 1 : kStreamMinRunBytes;
  auto run_task = [&](size_t k) {
    const Task& t = tasks[k];
    const TensorInfo& info = *t.box->tensor;
    const Box whole{Shape(info.shape.size(), 0), info.shape};
    const std::byte* base = t.mapping->at(t.box->file->header().data_start() + info.begin);
    // The piece's runs first, so that each copy can prefetch the short runs ahead (below).
    thread_local std::vector<Run> runs;
    runs.clear();
    for_each_contiguous_run(t.box->box, whole, t.piece, info.element_size,
                            [&](size_t mem_off, size_t file_off, size_t bytes) {
                              runs.push_back(Run{mem_off, file_off, bytes});
                            });
    for (size_t i = 0; i < runs.size(); ++i) {
      for (size_t j = i == 0 ? 1 : i + kPrefetchRuns; j <= i + kPrefetchRuns && j < runs.size();
           ++j) {
        if (runs[j].bytes <= kPrefetchMaxRunBytes) prefetch(base + runs[j].file_off, runs[j].bytes);
      }
      const Run& run = runs[i];
      // Run by run to every replica: the run is in cache after its first copy.
      for (std::byte* dst : t.box->destinations) {
        if (stream && run.bytes >= min_run) {
          stream_copy(dst + run.mem_off, base + run.file_off, run.bytes);
        } else {
          std::memcpy(dst + run.mem_off, base + run.file_off, run.bytes);
        }
      }
    }
    if (stream) stream_fence();
    if (on_bytes) on_bytes(static_cast<uint64_t>(t.piece.num_elements()) * info.element_size);
  };
  pool.parallel_for(tasks.size(), run_task);
  if (!fallback.empty()) {
    fallback.run({.pool = &pool, .on_bytes = on_bytes});
    std::vector<std::pair<const MappedBox*, size_t>> copies;
    for (const MappedBox* b : fallen) {
      for (size_t i = 1; i < b->destinations.size(); ++i) copies.emplace_back(b, i);
    }
    pool.parallel_for(copies.size(), [&](size_t i) {
      const MappedBox& b = *copies[i].first;
      std::memcpy(b.destinations[copies[i].second], b.destinations.front(), box_bytes(b));
    });
  }
  return report;
}

}  // namespace meshlayout::io_internal
