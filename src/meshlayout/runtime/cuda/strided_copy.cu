// strided_copy.cu — see strided_copy.h.
#include "meshlayout/runtime/cuda/strided_copy.h"

#include <cstdint>
#include <vector>

#include "meshlayout/runtime/cuda/cuda_context.h"

namespace meshlayout::cuda {
namespace {

constexpr int64_t kTaskBytes = int64_t{128} << 10;
constexpr int kThreads = 256;

struct Piece {
  char* dst;
  const char* src;
  int64_t rows, dst_pitch, src_pitch;  // pitches in bytes
  int64_t words_per_row;               // run_bytes / word
  int64_t rows_per_task, words_per_task, tasks_per_row;
  int64_t first_task;
  int32_t word;  // bytes: 16, 8, 4, 2 or 1
};

template <typename W>
__device__ void copy_task(const Piece& p, int64_t row0, int64_t nrows, int64_t col0,
                          int64_t ncols) {
  const int64_t total = nrows * ncols;
  constexpr int kUnroll = 4;
  for (int64_t base = threadIdx.x; base < total; base += int64_t{kThreads} * kUnroll) {
    W v[kUnroll];
    int64_t at[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + int64_t{u} * kThreads;
      at[u] = i;
      if (i < total) {
        const int64_t r = row0 + i / ncols, c = col0 + i % ncols;
        v[u] = *reinterpret_cast<const W*>(p.src + r * p.src_pitch + c * int64_t{sizeof(W)});
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = at[u];
      if (i < total) {
        const int64_t r = row0 + i / ncols, c = col0 + i % ncols;
        *reinterpret_cast<W*>(p.dst + r * p.dst_pitch + c * int64_t{sizeof(W)}) = v[u];
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) strided_copy_kernel(const Piece* pieces, int n) {
  const int64_t task = blockIdx.x;
  int lo = 0, hi = n - 1;  // the last piece whose first task is <= task
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pieces[mid].first_task <= task)
      lo = mid;
    else
      hi = mid - 1;
  }
  const Piece p = pieces[lo];
  const int64_t t = task - p.first_task;
  const int64_t row0 = (t / p.tasks_per_row) * p.rows_per_task;
  const int64_t col0 = (t % p.tasks_per_row) * p.words_per_task;
  const int64_t nrows = min(p.rows_per_task, p.rows - row0);
  const int64_t ncols = min(p.words_per_task, p.words_per_row - col0);
  switch (p.word) {
    case 16:
      copy_task<uint4>(p, row0, nrows, col0, ncols);
      break;
    case 8:
      copy_task<uint2>(p, row0, nrows, col0, ncols);
      break;
    case 4:
      copy_task<uint32_t>(p, row0, nrows, col0, ncols);
      break;
    case 2:
      copy_task<uint16_t>(p, row0, nrows, col0, ncols);
      break;
    default:
      copy_task<uint8_t>(p, row0, nrows, col0, ncols);
      break;
  }
}

int word_for(uintptr_t dst, uintptr_t src, int64_t dpitch, int64_t spitch, int64_t run) {
  for (int w : {16, 8, 4, 2}) {
    if (dst % w == 0 && src % w == 0 && dpitch % w == 0 && spitch % w == 0 && run % w == 0) {
      return w;
    }
  }
  return 1;
}

// Adds the 2-D pieces of one copy (its outer dimensions enumerated) to `pieces`.
void add_pieces(const StridedCopy& c, std::vector<Piece>& pieces, int64_t& tasks) {
  const size_t rank = c.extent.size();
  int64_t runs = 1;
  for (int64_t e : c.extent) runs *= e;
  if (runs == 0 || c.run_bytes == 0) return;
  const int64_t rows = rank == 0 ? 1 : c.extent[rank - 1];
  const int64_t dpitch = rank == 0 ? 0 : c.dst_stride[rank - 1];
  const int64_t spitch = rank == 0 ? 0 : c.src_stride[rank - 1];
  const int64_t run = static_cast<int64_t>(c.run_bytes);
  for_each_outer_offset(c, rank > 0 ? rank - 1 : 0, [&](int64_t dst_off, int64_t src_off) {
    Piece p{};
    p.dst = reinterpret_cast<char*>(c.dst + dst_off);
    p.src = reinterpret_cast<const char*>(c.src + src_off);
    p.rows = rows;
    p.dst_pitch = dpitch;
    p.src_pitch = spitch;
    p.word = word_for(reinterpret_cast<uintptr_t>(p.dst), reinterpret_cast<uintptr_t>(p.src),
                      rows > 1 ? dpitch : 0, rows > 1 ? spitch : 0, run);
    p.words_per_row = run / p.word;
    if (run >= kTaskBytes) {  // long rows: one row per task, cut into column chunks
      p.rows_per_task = 1;
      p.words_per_task = kTaskBytes / p.word;
      p.tasks_per_row = (p.words_per_row + p.words_per_task - 1) / p.words_per_task;
    } else {
      p.rows_per_task = kTaskBytes / run;
      p.words_per_task = p.words_per_row;
      p.tasks_per_row = 1;
    }
    p.first_task = tasks;
    tasks += ((rows + p.rows_per_task - 1) / p.rows_per_task) * p.tasks_per_row;
    pieces.push_back(p);
  });
}

}  // namespace

void launch_strided_copies(std::span<const StridedCopy> copies, cudaStream_t stream, int gpu) {
  std::vector<Piece> pieces;
  int64_t tasks = 0;
  for (const StridedCopy& c : copies) add_pieces(c, pieces, tasks);
  if (pieces.empty()) return;
  const size_t bytes = pieces.size() * sizeof(Piece);
  void* table = nullptr;
  check(cudaMallocAsync(&table, bytes, stream), "cudaMallocAsync (copy table)", gpu);
  upload_async(table, pieces.data(), bytes, gpu, stream);  // the host does not wait
  for (int64_t first = 0; first < tasks; first += int64_t{1} << 30) {
    // Grids of at most 2^30 blocks; a later launch skips the tasks of earlier ones.
    const int64_t count = std::min<int64_t>(tasks - first, int64_t{1} << 30);
    if (first > 0) {
      std::vector<Piece> shifted = pieces;  // rare: over 2^30 tasks (128 TiB)
      for (Piece& p : shifted) p.first_task -= first;
      check(cudaMemcpyAsync(table, shifted.data(), bytes, cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (copy table)", gpu);
    }
    strided_copy_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(
        static_cast<const Piece*>(table), static_cast<int>(pieces.size()));
    check_launch("strided_copy_kernel", gpu);
  }
  check(cudaFreeAsync(table, stream), "cudaFreeAsync (copy table)", gpu);
}

}  // namespace meshlayout::cuda
