// cpu/matmul.cc — the CPU implementation of kernels/matmul.h (moved unchanged from
// ops/matmul.cc, ops/matmul_backward.cc and ops/partial_sum.cc).
#include "meshlayout/kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {
namespace {

// The sums run tile by tile so the accumulator stays in L1 while the summands stream through.
constexpr int64_t kTileElements = 2048;

template <typename T>
void transpose_2d(const std::byte* src, std::byte* dst, int64_t rows, int64_t cols) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  constexpr int64_t kTile = 32;  // cache blocking
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i) {
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j) d[j * rows + i] = s[i * cols + j];
      }
    }
  }
}

// Stores `n` values: with non-temporal stores when `stream` (large outputs: no read for
// ownership of lines about to be overwritten whole, no eviction of the summands), else memcpy.
template <typename T>
void store(T* to, const T* from, int64_t n, bool stream) {
#if defined(__SSE2__)
  if (stream) {
    int64_t i = 0;
    for (; i < n && (reinterpret_cast<uintptr_t>(to + i) & 15) != 0; ++i) to[i] = from[i];
    if constexpr (std::is_same_v<T, float>) {
      for (; i + 4 <= n; i += 4) _mm_stream_ps(to + i, _mm_loadu_ps(from + i));
    } else {
      for (; i + 2 <= n; i += 2) _mm_stream_pd(to + i, _mm_loadu_pd(from + i));
    }
    for (; i < n; ++i) to[i] = from[i];
    return;
  }
#endif
  std::memcpy(to, from, static_cast<size_t>(n) * sizeof(T));
}

// out[i] = a[i] + b[i], and acc[i] += a[i]: the same additions in the same order as any scalar
// loop (same bits); with the pointers declared unaliased they vectorise (kernels build at -O3).
template <typename T>
void add_arrays(T* __restrict out, const T* __restrict a, const T* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void add_in_place(T* __restrict acc, const T* __restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += a[i];
}

// One run of `length` elements, tile by tile: the tile's sum is built in `acc` (L1) and stored
// to `dst` and every replica in `also`. `tmp` holds the sum of a multi-source term.
template <typename T>
void sum_run(T* dst, const std::vector<std::vector<const T*>>& terms, const std::vector<T*>& also,
             int64_t length, T* acc, T* tmp, bool stream) {
  for (int64_t at = 0; at < length; at += kTileElements) {
    const int64_t n = std::min(kTileElements, length - at);
    if (terms.empty()) std::fill(acc, acc + n, T{0});
    for (size_t t = 0; t < terms.size(); ++t) {
      const std::vector<const T*>& s = terms[t];
      T* sum = t == 0 ? acc : tmp;
      const T* a = s[0] + at;
      if (s.size() == 1) {
        if (t == 0) {
          std::memcpy(acc, a, static_cast<size_t>(n) * sizeof(T));
        } else {
          add_in_place(acc, a, n);
        }
        continue;
      }
      add_arrays(sum, a, s[1] + at, n);
      for (size_t j = 2; j < s.size(); ++j) add_in_place(sum, s[j] + at, n);
      if (t > 0) add_in_place(acc, tmp, n);
    }
    store(dst + at, acc, n, stream);
    for (T* r : also) store(r + at, acc, n, stream);
  }
}

// Element offset of `coords` in a row-major buffer holding `box`.
int64_t offset_in(const Box& box, const std::vector<int64_t>& coords) {
  int64_t off = 0;
  for (size_t d = 0; d < coords.size(); ++d) off = off * box.shape[d] + (coords[d] - box.offset[d]);
  return off;
}

template <typename T>
void run_piece(const SumPiece& job) {
  const Box& region = job.region;
  const Box& dst_box = job.dst->box;
  const size_t rank = region.shape.size();
  if (region.num_elements() == 0) return;
  // Dimensions after `j` span every buffer whole, so dims j… form one contiguous run.
  auto whole_everywhere = [&](size_t d) {
    if (dst_box.shape[d] != region.shape[d]) return false;
    for (const auto& term : job.terms) {
      for (const Array::Shard* s : term) {
        if (s->box.shape[d] != region.shape[d]) return false;
      }
    }
    return true;
  };
  size_t j = rank - 1;  // rank >= 1: outputs of matmul have rank >= 2
  while (j > 0 && whole_everywhere(j)) --j;
  int64_t length = 1, outer = 1;
  for (size_t d = 0; d < rank; ++d) (d >= j ? length : outer) *= region.shape[d];

  std::vector<std::vector<const T*>> terms(job.terms.size());
  for (size_t t = 0; t < job.terms.size(); ++t) terms[t].resize(job.terms[t].size());
  std::vector<T*> also(job.also.size());
  std::vector<T> acc(static_cast<size_t>(kTileElements)), tmp(static_cast<size_t>(kTileElements));
  std::vector<int64_t> coords = region.offset;
  for (int64_t row = 0; row < outer; ++row) {
    int64_t rest = row;  // coordinates of dims < j, row-major
    for (size_t d = j; d-- > 0;) {
      coords[d] = region.offset[d] + rest % region.shape[d];
      rest /= region.shape[d];
    }
    const int64_t dst_off = offset_in(dst_box, coords);
    T* dst = reinterpret_cast<T*>(job.dst->buffer.data()) + dst_off;
    for (size_t t = 0; t < job.terms.size(); ++t) {
      for (size_t s = 0; s < job.terms[t].size(); ++s) {
        const Array::Shard& src = *job.terms[t][s];
        terms[t][s] = reinterpret_cast<const T*>(src.buffer.data()) + offset_in(src.box, coords);
      }
    }
    for (size_t r = 0; r < also.size(); ++r) {
      also[r] = reinterpret_cast<T*>(job.also[r]->buffer.data()) + dst_off;
    }
    sum_run<T>(dst, terms, also, length, acc.data(), tmp.data(), job.stream);
  }
#if defined(__SSE2__)
  if (job.stream) _mm_sfence();  // order the non-temporal stores before the pool's hand-off
#endif
}

}  // namespace

void matmul_rows_cpu(const MatmulRows& c) {
  cpu_kernels::dispatch_float(c.dtype, [&]<typename T>(T* /*tag*/) {
    const T* a = reinterpret_cast<const T*>(c.x->buffer.data()) + c.row * c.k;
    const T* b = reinterpret_cast<const T*>(c.w->buffer.data());
    T* out = reinterpret_cast<T*>(c.out->buffer.data()) + c.row * c.n;
    cpu_kernels::gemm<T>(c.rows, c.n, c.k, a, std::max<int64_t>(1, c.k), b, c.n, out, c.n);
    for (Array::Shard* r : c.replicas) {  // while the rows are still in cache
      std::memcpy(reinterpret_cast<T*>(r->buffer.data()) + c.row * c.n, out,
                  static_cast<size_t>(c.rows * c.n) * sizeof(T));
    }
  });
}

void add_into_cpu(const AddInto& args) {
  const int64_t n = args.n;
  if (args.dtype == DType::kF32) {
    float* d = reinterpret_cast<float*>(args.dst->buffer.data());
    const float* a = reinterpret_cast<const float*>(args.src->buffer.data());
    for (int64_t i = 0; i < n; ++i) d[i] += a[i];
  } else {
    double* d = reinterpret_cast<double*>(args.dst->buffer.data());
    const double* a = reinterpret_cast<const double*>(args.src->buffer.data());
    for (int64_t i = 0; i < n; ++i) d[i] += a[i];
  }
}

void transpose_box_cpu(const TransposeBox& args) {
  const Array::Shard& s = *args.src;
  Array::Shard& o = *args.dst;
  if (args.dtype == DType::kF32) {
    transpose_2d<float>(s.buffer.data(), o.buffer.data(), s.box.shape[0], s.box.shape[1]);
  } else {
    transpose_2d<double>(s.buffer.data(), o.buffer.data(), s.box.shape[0], s.box.shape[1]);
  }
}

void sum_piece_cpu(const SumPiece& args) {
  if (args.dtype == DType::kF32) {
    run_piece<float>(args);
  } else {
    run_piece<double>(args);
  }
}

}  // namespace meshlayout
