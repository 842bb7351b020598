// permute_kernels.cu — the CUDA implementations of kernels/matmul.h's transpose_box (a tiled
// transpose through shared memory), permute.h's permute_shard (any rank, elements moved as
// words of the widest size that divides them; batched tiled transposes when the innermost
// output dimension is strided in the source) and elementwise.h's concatenate_shards (one
// cudaMemcpy2DAsync per input). They move bytes: bit-identical to the CPU ops. Registered by
// register_cuda_linear_kernels() (linear_kernels.cu).
#include <cuda_runtime.h>

#include <vector>

#include "meshlayout/kernels/cuda/shard_kernel_util.cuh"
#include "meshlayout/kernels/elementwise.h"
#include "meshlayout/kernels/matmul.h"
#include "meshlayout/kernels/permute.h"

namespace meshlayout::cuda_kernels {
namespace {

// ---- transpose_box ----

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// dst (cols × rows) = srcᵀ (src rows × cols); each block moves 32 × 32 tiles.
template <typename T>
__global__ void transpose_kernel(const T* src, T* dst, int64_t rows, int64_t cols, int64_t tiles_x,
                                 int64_t tiles) {
  __shared__ T tile[kTile][kTile + 1];
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_x) * kTile, c0 = (t % tiles_x) * kTile;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[j][threadIdx.x] = src[r * cols + c];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t c = c0 + j, r = r0 + threadIdx.x;  // dst row c, column r
      if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

void transpose_box_cuda(const TransposeBox& a) {
  const int64_t rows = a.src->box.shape[0], cols = a.src->box.shape[1];
  if (rows == 0 || cols == 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  const int64_t tiles_x = (cols + kTile - 1) / kTile;
  const int64_t tiles = tiles_x * ((rows + kTile - 1) / kTile);
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{1} << 16));
  const dim3 block(kTile, kTileRows);
  dispatch_f32_f64("transpose_box", a.dtype, [&]<typename T>(T* /*tag*/) {
    transpose_kernel<T>
        <<<grid, block, 0, s>>>(elements<T>(a.src), elements<T>(a.dst), rows, cols, tiles_x, tiles);
  });
  cuda::check_launch("transpose_box", id);
}

// ---- permute_shard ----

constexpr int kMaxPermuteRank = 12;

// Output word i (row-major over out_shape) is source word Σ k_d·src_stride[d].
struct PermuteWords {
  const void* src;
  void* dst;
  int rank;
  int64_t out_shape[kMaxPermuteRank];
  int64_t src_stride[kMaxPermuteRank];
};

template <typename W>
__global__ void permute_kernel(const PermuteWords p, int64_t total) {
  const W* src = static_cast<const W*>(p.src);
  W* dst = static_cast<W*>(p.dst);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t k = rest % p.out_shape[d];
      rest /= p.out_shape[d];
      off += k * p.src_stride[d];
    }
    dst[i] = src[off];
  }
}

// A permutation whose innermost output dimension `a` is strided in the source while an outer
// output dimension `b` is the source's contiguous one: batched 2-D transposes of (b, a) planes
// in 32 × 32 tiles through shared memory, so that both the reads (along b) and the writes
// (along a) are coalesced. The other dimensions form the batch.
struct TiledPermute {
  const void* src;
  void* dst;
  int64_t a_extent, b_extent;
  int64_t a_src_stride;  // b's source stride is 1, a's destination stride 1
  int64_t b_dst_stride;
  int64_t tiles_a, tiles_b, tiles;
  int batch_rank;
  int64_t batch_shape[kMaxPermuteRank];
  int64_t batch_src_stride[kMaxPermuteRank];
  int64_t batch_dst_stride[kMaxPermuteRank];
};

template <typename W>
__global__ void tiled_permute_kernel(const TiledPermute p) {
  __shared__ W tile[kTile][kTile + 1];  // [a in tile][b in tile]
  const W* src = static_cast<const W*>(p.src);
  W* dst = static_cast<W*>(p.dst);
  for (int64_t t = blockIdx.x; t < p.tiles; t += gridDim.x) {
    int64_t rest = t / (p.tiles_a * p.tiles_b);
    const int64_t in_plane = t - rest * p.tiles_a * p.tiles_b;
    const int64_t b0 = (in_plane / p.tiles_a) * kTile, a0 = (in_plane % p.tiles_a) * kTile;
    int64_t s_base = 0, d_base = 0;
    for (int d = p.batch_rank - 1; d >= 0; --d) {
      const int64_t k = rest % p.batch_shape[d];
      rest /= p.batch_shape[d];
      s_base += k * p.batch_src_stride[d];
      d_base += k * p.batch_dst_stride[d];
    }
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t ia = a0 + j, ib = b0 + threadIdx.x;
      if (ia < p.a_extent && ib < p.b_extent)
        tile[j][threadIdx.x] = src[s_base + ib + ia * p.a_src_stride];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t ib = b0 + j, ia = a0 + threadIdx.x;
      if (ia < p.a_extent && ib < p.b_extent)
        dst[d_base + ib * p.b_dst_stride + ia] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

// Launches kernel<W> with `args` for the word size `word` (16, 8, 4, 2 or 1 bytes).
template <template <typename> class Launch, typename... Args>
void with_word(size_t word, Args&&... args) {
  switch (word) {
    case 16:
      Launch<Word16>::run(args...);
      break;
    case 8:
      Launch<uint64_t>::run(args...);
      break;
    case 4:
      Launch<uint32_t>::run(args...);
      break;
    case 2:
      Launch<uint16_t>::run(args...);
      break;
    default:
      Launch<uint8_t>::run(args...);
      break;
  }
}

template <typename W>
struct LaunchPermute {
  static void run(const PermuteWords& p, int64_t total, cudaStream_t s) {
    permute_kernel<W><<<grid_for(total), kThreads, 0, s>>>(p, total);
  }
};

template <typename W>
struct LaunchTiledPermute {
  static void run(const TiledPermute& p, cudaStream_t s) {
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(p.tiles, int64_t{1} << 16));
    tiled_permute_kernel<W><<<grid, dim3(kTile, kTileRows), 0, s>>>(p);
  }
};

void permute_shard_cuda(const PermuteShard& a) {
  const int64_t n = a.src->box.num_elements();
  if (n == 0 || a.element_size == 0) return;
  const int64_t id = a.dst->device_id;
  cudaStream_t s = cuda::enter_device(id);
  const Shape& in = a.src->box.shape;
  const size_t rank = in.size();
  // The widest word that divides the element and aligns both buffers.
  const uint64_t bits = reinterpret_cast<uintptr_t>(a.src->buffer.data()) |
                        reinterpret_cast<uintptr_t>(a.dst->buffer.data()) | a.element_size;
  const size_t word = bits % 16 == 0  ? 16
                      : bits % 8 == 0 ? 8
                      : bits % 4 == 0 ? 4
                      : bits % 2 == 0 ? 2
                                      : 1;
  const int64_t per_element = static_cast<int64_t>(a.element_size / word);
  // Output dims (source strides in words), then the words of an element as the last dim;
  // extents of 1 dropped and dims the source walks contiguously merged.
  std::vector<int64_t> in_strides(rank);
  int64_t stride = per_element;
  for (size_t d = rank; d-- > 0;) {
    in_strides[d] = stride;
    stride *= in[d];
  }
  std::vector<int64_t> shape, strides;
  auto push = [&](int64_t extent, int64_t st) {
    if (extent == 1) return;
    if (!shape.empty() && strides.back() == st * extent) {
      shape.back() *= extent;
      strides.back() = st;
      return;
    }
    shape.push_back(extent);
    strides.push_back(st);
  };
  for (size_t i = 0; i < rank; ++i) {
    const size_t p = static_cast<size_t>(a.perm[i]);
    push(in[p], in_strides[p]);
  }
  push(per_element, 1);
  if (shape.size() > static_cast<size_t>(kMaxPermuteRank)) {
    throw ValueError(concat({"permute_shard on CUDA: rank ", std::to_string(rank),
                             " is above the supported ", std::to_string(kMaxPermuteRank - 1)}));
  }
  // Output dim b (not the last) that the source walks contiguously, with the last one strided.
  const size_t r = shape.size();
  size_t b = r;
  if (r >= 2 && strides[r - 1] != 1) {
    for (size_t d = 0; d + 1 < r; ++d) {
      if (strides[d] == 1) b = d;
    }
  }
  if (b < r && shape[r - 1] >= 4 && shape[b] >= 4) {
    std::vector<int64_t> dst_strides(r);
    int64_t st = 1;
    for (size_t d = r; d-- > 0;) {
      dst_strides[d] = st;
      st *= shape[d];
    }
    TiledPermute t{};
    t.src = a.src->buffer.data();
    t.dst = a.dst->buffer.data();
    t.a_extent = shape[r - 1];
    t.b_extent = shape[b];
    t.a_src_stride = strides[r - 1];
    t.b_dst_stride = dst_strides[b];
    t.tiles_a = (t.a_extent + kTile - 1) / kTile;
    t.tiles_b = (t.b_extent + kTile - 1) / kTile;
    int64_t batch = 1;
    for (size_t d = 0; d + 1 < r; ++d) {
      if (d == b) continue;
      t.batch_shape[t.batch_rank] = shape[d];
      t.batch_src_stride[t.batch_rank] = strides[d];
      t.batch_dst_stride[t.batch_rank] = dst_strides[d];
      ++t.batch_rank;
      batch *= shape[d];
    }
    t.tiles = batch * t.tiles_a * t.tiles_b;
    with_word<LaunchTiledPermute>(word, t, s);
  } else {
    PermuteWords p{};
    p.src = a.src->buffer.data();
    p.dst = a.dst->buffer.data();
    p.rank = static_cast<int>(r);
    for (size_t d = 0; d < r; ++d) {
      p.out_shape[d] = shape[d];
      p.src_stride[d] = strides[d];
    }
    with_word<LaunchPermute>(word, p, n * per_element, s);
  }
  cuda::check_launch("permute_shard", id);
}

// ---- concatenate_shards ----

void concatenate_shards_cuda(const ConcatenateShards& a) {
  Array::Shard& o = *a.dst;
  const size_t ax = a.axis;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < ax; ++d) outer *= o.box.shape[d];
  for (size_t d = ax + 1; d < o.box.shape.size(); ++d) inner *= o.box.shape[d];
  if (outer == 0) return;
  size_t row = 0;  // bytes of one outer row of dst: the inputs' runs side by side
  for (const Array::Shard* in : a.inputs) {
    row += static_cast<size_t>(in->box.shape[ax] * inner) * a.elem;
  }
  const int64_t id = o.device_id;
  cudaStream_t s = cuda::enter_device(id);
  size_t at = 0;
  for (const Array::Shard* in : a.inputs) {
    const size_t run = static_cast<size_t>(in->box.shape[ax] * inner) * a.elem;
    if (run == 0) continue;
    StridedCopy c{};
    c.dst = o.buffer.data() + at;
    c.src = in->buffer.data();
    c.run_bytes = run;
    c.rank = 1;
    c.shape[0] = outer;
    c.dst_stride[0] = static_cast<int64_t>(row);
    c.src_stride[0] = static_cast<int64_t>(run);
    strided_copy(c, s, id, "concatenate_shards");
    at += run;
  }
}

}  // namespace
}  // namespace meshlayout::cuda_kernels

namespace meshlayout::internal_cuda {

void register_cuda_permute_kernels() {
  using namespace cuda_kernels;
  transpose_box.define(DeviceKind::kCuda, &transpose_box_cuda);
  permute_shard.define(DeviceKind::kCuda, &permute_shard_cuda);
  concatenate_shards.define(DeviceKind::kCuda, &concatenate_shards_cuda);
}

}  // namespace meshlayout::internal_cuda
