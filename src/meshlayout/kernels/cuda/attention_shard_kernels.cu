// attention_shard_kernels.cu — the CUDA implementation of kernels/attention.h's
// attention_shard_forward: every (batch row, query head) of an output shard in one or two
// launches, honouring all of AttentionHeadForward's options (causal with a query offset,
// key_length < S, grouped-query heads, sliding window, logit soft cap, scale, key masks of I32,
// I64, U8 or BOOL). Rows that see no key get zeros, as on the CPU.
//
// Two kernels:
//   - flash_kernel (F32, more than kDecodeRows query rows, head_dim <= 128): a tiled,
//     flash-attention-style forward. One block of 256 threads per (64-query tile, head, batch
//     row); the query tile and 64-key tiles of k (float) and v (double) in shared memory; each
//     thread holds a 4 × 4 block of the scores and a 4 × (head_dim/16) block of the output.
//     Key tiles no row of the query tile sees (causal, window) are never visited. Scores are
//     float FMAs over 32 dims at a time summed in double, scaled (and soft-capped) in double;
//     the online softmax keeps each row's running max and sum in double, exp(score − max) in
//     float (≤ 2 ulp) and out = Σ p·v in double: the result is within ~1e-7 of the F64 op.
//   - row_kernel (F32 with few query rows or head_dim > 128, and F64): one block of 128 threads
//     per (query row, head, batch row, key split); a warp per key computes q·k in double, the
//     online softmax and Σ p·v run in double over chunks of kChunk keys. With several splits
//     (long caches in decoding) each block writes its (max, sum, Σ p·v) to a scratch block and
//     combine_kernel merges them; with one it writes the output itself.
// Any other case (head_dim > kRowMaxD, grids past CUDA's limits) runs the per-head op
// (attention_kernels.cu) once per (batch row, head), so correctness never depends on a fast path.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cuda/layer_kernel_util.cuh"
#include "meshlayout/kernels/cuda/register.h"

namespace meshlayout::layer_cuda {
namespace {

constexpr int kBM = 64;             // query rows per flash block
constexpr int kBN = 64;             // keys per flash tile
constexpr int kFlashThreads = 256;  // 16 × 16: ty picks rows ty + 16·i, tx keys/dims tx + 16·j
constexpr int kFlashMaxD = 128;
constexpr int64_t kDecodeRows = 4;  // at most this many query rows: row_kernel (decoding)
constexpr int kRowThreads = 128;
constexpr int kRowMaxD = 4 * kRowThreads;  // each thread keeps up to 4 output dims
constexpr int kChunk = 256;                // keys whose scores row_kernel keeps at a time
constexpr int kMaxSplits = 64;
constexpr size_t kSplitScratchBytes = size_t{64} << 20;  // at most this much split scratch
constexpr int64_t kEnoughBlocks = 512;                   // (row, head) tasks that need no split

struct ShardParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const void* mask;  // null: none; else the shard's (batch, S) flags
  int mask_kind;     // 0: I32, 1: I64, 2: U8 or BOOL
  int64_t T, S, L, D;
  int64_t nh, nkh;      // query heads of out's box, key/value heads of k's box
  int64_t head_offset;  // out.box.offset[2]
  int64_t kv_offset;    // k.box.offset[2]
  int64_t r;
  bool causal;
  int64_t query_offset, window;
  double scale, cap;
};

// The keys query row t sees: [first_of, visible_of), as cpu/attention.cc.
__host__ __device__ inline int64_t visible_of(const ShardParams& p, int64_t t) {
  if (!p.causal) return p.L;
  const int64_t last = t + p.query_offset + 1;
  return last < 0 ? 0 : (last < p.L ? last : p.L);
}
__host__ __device__ inline int64_t first_of(const ShardParams& p, int64_t t, int64_t visible) {
  if (p.window <= 0) return 0;
  const int64_t f = t + p.query_offset - p.window + 1;
  return f <= 0 ? 0 : (f < visible ? f : visible);
}

__device__ __forceinline__ bool key_kept(const ShardParams& p, int64_t b, int64_t s) {
  if (p.mask == nullptr) return true;
  const int64_t at = b * p.S + s;
  switch (p.mask_kind) {
    case 0:
      return static_cast<const int32_t*>(p.mask)[at] != 0;
    case 1:
      return static_cast<const int64_t*>(p.mask)[at] != 0;
    default:
      return static_cast<const uint8_t*>(p.mask)[at] != 0;
  }
}

// The scaled (and soft-capped) score of a raw q·k.
__device__ __forceinline__ double logit(const ShardParams& p, double dot) {
  double z = dot * p.scale;
  if (p.cap > 0) z = p.cap * ::tanh(z / p.cap);
  return z;
}

// Sum / max over the 16 lanes sharing a row (lanes differing in the low 4 bits).
__device__ __forceinline__ double sum16(double v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double max16(double v) {
  for (int o = 8; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ---- The flash kernel (F32) ----

// Shared memory: v tile (kBN × 16·NJ doubles), probabilities (kBM × kBN doubles), q tile and
// k tile (kBM, kBN × ks floats, ks >= D a multiple of 4, dims past D zero), the tile's key flags.
size_t flash_shared_bytes(int nj, int ks) {
  return static_cast<size_t>(kBN) * 16 * nj * sizeof(double) +
         static_cast<size_t>(kBM) * kBN * sizeof(double) +
         static_cast<size_t>(kBM + kBN) * ks * sizeof(float) + kBN * sizeof(int);
}

template <int NJ>  // D <= 16·NJ
__global__ void __launch_bounds__(kFlashThreads) flash_kernel(ShardParams p, int ks, int tiles) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int VS = 16 * NJ;
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  double* sv = reinterpret_cast<double*>(smem);
  double* sp = sv + kBN * VS;
  float* sq = reinterpret_cast<float*>(sp + kBM * kBN);
  float* sk = sq + kBM * ks;
  int* keep = reinterpret_cast<int*>(sk + kBN * ks);

  // The longest tiles first (causal: the last rows see the most keys).
  const int tile = tiles - 1 - static_cast<int>(blockIdx.x);
  const int64_t t0 = int64_t{tile} * kBM;
  const int64_t hl = blockIdx.y, b = blockIdx.z;
  const int64_t D = p.D, T = p.T;
  const int64_t kv_head = (p.head_offset + hl) / p.r - p.kv_offset;
  const int64_t q_stride = p.nh * D, kv_stride = p.nkh * D;
  const float* q = static_cast<const float*>(p.q) + (b * T * p.nh + hl) * D;
  const float* k = static_cast<const float*>(p.k) + (b * p.S * p.nkh + kv_head) * D;
  const float* v = static_cast<const float*>(p.v) + (b * p.S * p.nkh + kv_head) * D;
  float* out = static_cast<float*>(p.out) + (b * T * p.nh + hl) * D;
  const int tid = static_cast<int>(threadIdx.x), tx = tid & 15, ty = tid >> 4;
  const int64_t rows = T - t0 < kBM ? T - t0 : kBM;
  const int dp = static_cast<int>((D + 3) & ~int64_t{3});

  for (int idx = tid; idx < kBM * ks; idx += kFlashThreads) {
    const int i = idx / ks, d = idx % ks;
    sq[idx] = (i < rows && d < D) ? q[(t0 + i) * q_stride + d] : 0.f;
  }
  int64_t vis[4], first[4];
  double m[4], l[4], o[4][NJ];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    vis[i] = visible_of(p, t);
    first[i] = first_of(p, t, vis[i]);
    m[i] = kMinusInf;
    l[i] = 0;
#pragma unroll
    for (int j = 0; j < NJ; ++j) o[i][j] = 0;
  }
  // The keys any row of the tile sees (first_of and visible_of grow with t).
  const int64_t lo = first_of(p, t0, visible_of(p, t0));
  const int64_t hi = visible_of(p, t0 + rows - 1);

  for (int64_t kt = lo; kt < hi; kt += kBN) {
    const int n = static_cast<int>(hi - kt < kBN ? hi - kt : kBN);
    __syncthreads();  // the previous tile's reads are done (and the q tile is written)
    for (int idx = tid; idx < kBN * ks; idx += kFlashThreads) {
      const int j = idx / ks, d = idx % ks;
      sk[idx] = (j < n && d < D) ? k[(kt + j) * kv_stride + d] : 0.f;
    }
    for (int idx = tid; idx < kBN * VS; idx += kFlashThreads) {
      const int j = idx / VS, d = idx % VS;
      sv[idx] = (j < n && d < D) ? static_cast<double>(v[(kt + j) * kv_stride + d]) : 0.0;
    }
    if (tid < kBN) keep[tid] = (tid < n && key_kept(p, b, kt + tid)) ? 1 : 0;
    __syncthreads();

    // Scores: float FMAs over 32 dims at a time, summed in double.
    double acc[4][4];
    float accf[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0;
    }
    for (int d0 = 0; d0 < dp; d0 += 32) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) accf[i][j] = 0.f;
      }
      const int d1 = d0 + 32 < dp ? d0 + 32 : dp;
      for (int d = d0; d < d1; d += 4) {
        float4 qv[4], kv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          qv[i] = *reinterpret_cast<const float4*>(sq + (ty + 16 * i) * ks + d);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          kv[j] = *reinterpret_cast<const float4*>(sk + (tx + 16 * j) * ks + d);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float a = accf[i][j];
            a = fmaf(qv[i].x, kv[j].x, a);
            a = fmaf(qv[i].y, kv[j].y, a);
            a = fmaf(qv[i].z, kv[j].z, a);
            a = fmaf(qv[i].w, kv[j].w, a);
            accf[i][j] = a;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += static_cast<double>(accf[i][j]);
      }
    }

    // Online softmax per row; masked keys −∞ (probability 0).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      double z[4];
      double tile_max = kMinusInf;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int jj = tx + 16 * j;
        const int64_t s = kt + jj;
        const bool ok = jj < n && keep[jj] != 0 && s >= first[i] && s < vis[i];
        z[j] = ok ? logit(p, acc[i][j]) : kMinusInf;
        tile_max = fmax(tile_max, z[j]);
      }
      tile_max = max16(tile_max);
      const double m_new = fmax(m[i], tile_max);
      const bool any = m_new != kMinusInf;
      const double alpha = any ? ::exp(m[i] - m_new) : 1.0;  // exp(−∞) = 0 for the first keys
      double row_sum = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float e = (any && z[j] != kMinusInf) ? ::expf(static_cast<float>(z[j] - m_new)) : 0.f;
        sp[(ty + 16 * i) * kBN + tx + 16 * j] = static_cast<double>(e);
        row_sum += static_cast<double>(e);
      }
      row_sum = sum16(row_sum);
      l[i] = l[i] * alpha + row_sum;
#pragma unroll
      for (int j = 0; j < NJ; ++j) o[i][j] *= alpha;
      m[i] = any ? m_new : m[i];
    }
    __syncthreads();

    // out += P · V in double.
    for (int kk = 0; kk < n; ++kk) {
      double pv[4], vv[NJ];
#pragma unroll
      for (int i = 0; i < 4; ++i) pv[i] = sp[(ty + 16 * i) * kBN + kk];
#pragma unroll
      for (int j = 0; j < NJ; ++j) vv[j] = sv[kk * VS + tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) o[i][j] = fma(pv[i], vv[j], o[i][j]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    if (t >= T) continue;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int64_t d = tx + 16 * j;
      if (d < D) out[t * q_stride + d] = l[i] > 0 ? static_cast<float>(o[i][j] / l[i]) : 0.f;
    }
  }
}

// ---- The row kernel (decoding, F64, large head_dim) ----

// Block (x: query row t · nh + head, y: key split, z: batch row). Keys [lo + y·per_split,
// lo + (y+1)·per_split) ∩ the row's visible keys. splits == 1: writes out (E); else the record
// (max, sum, Σ p·v[D]) of the split, in double, to part.
template <typename E>
__global__ void __launch_bounds__(kRowThreads)
    row_kernel(ShardParams p, double* part, int64_t lo, int64_t per_split, int splits) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ double reduce[32];
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  double* qs = reinterpret_cast<double*>(smem);  // D
  double* sc = qs + p.D;                         // kChunk
  const int64_t D = p.D, T = p.T;
  const int64_t task = blockIdx.x;
  const int64_t t = task / p.nh, hl = task % p.nh;
  const int64_t split = blockIdx.y, b = blockIdx.z;
  const int64_t kv_head = (p.head_offset + hl) / p.r - p.kv_offset;
  const int64_t q_stride = p.nh * D, kv_stride = p.nkh * D;
  const E* q = static_cast<const E*>(p.q) + (b * T * p.nh + hl) * D + t * q_stride;
  const E* k = static_cast<const E*>(p.k) + (b * p.S * p.nkh + kv_head) * D;
  const E* v = static_cast<const E*>(p.v) + (b * p.S * p.nkh + kv_head) * D;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5, warps = kRowThreads / 32;

  const int64_t vis = visible_of(p, t), first = first_of(p, t, vis);
  const int64_t a0 = lo + split * per_split, a1 = a0 + per_split;
  const int64_t s0 = first > a0 ? first : a0, s1 = vis < a1 ? vis : a1;
  for (int64_t d = tid; d < D; d += kRowThreads) qs[d] = static_cast<double>(q[d]);
  double m = kMinusInf, l = 0, o[4] = {0, 0, 0, 0};
  for (int64_t c0 = s0; c0 < s1; c0 += kChunk) {
    const int64_t n = s1 - c0 < kChunk ? s1 - c0 : kChunk;
    __syncthreads();  // q loaded; the previous chunk's scores read
    for (int64_t j = warp; j < n; j += warps) {
      const E* kr = k + (c0 + j) * kv_stride;
      double dot = 0;
      for (int64_t d = lane; d < D; d += 32) dot = fma(qs[d], static_cast<double>(kr[d]), dot);
      dot = warp_sum(dot);
      if (lane == 0) sc[j] = key_kept(p, b, c0 + j) ? logit(p, dot) : kMinusInf;
    }
    __syncthreads();
    double local = kMinusInf;
    for (int64_t j = tid; j < n; j += kRowThreads) local = fmax(local, sc[j]);
    const double m_new = fmax(m, block_max(local, reduce));  // block-uniform
    if (m_new == kMinusInf) continue;                        // nothing kept yet
    const double alpha = ::exp(m - m_new);
    double part_sum = 0;
    for (int64_t j = tid; j < n; j += kRowThreads) {
      const double e = sc[j] == kMinusInf ? 0.0 : ::exp(sc[j] - m_new);
      sc[j] = e;
      part_sum += e;
    }
    l = l * alpha + block_sum(part_sum, reduce);  // its barrier publishes sc
    m = m_new;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t d = tid + int64_t{kRowThreads} * i;
      if (d >= D) continue;
      double acc = o[i] * alpha;
      for (int64_t j = 0; j < n; ++j) {
        acc = fma(sc[j], static_cast<double>(v[(c0 + j) * kv_stride + d]), acc);
      }
      o[i] = acc;
    }
  }
  if (splits == 1) {
    E* out = static_cast<E*>(p.out) + (b * T * p.nh + hl) * D + t * q_stride;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t d = tid + int64_t{kRowThreads} * i;
      if (d < D) out[d] = l > 0 ? static_cast<E>(o[i] / l) : E(0);
    }
    return;
  }
  double* rec = part + ((b * T * p.nh + task) * splits + split) * (D + 2);
  if (tid == 0) {
    rec[0] = m;
    rec[1] = l;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t d = tid + int64_t{kRowThreads} * i;
    if (d < D) rec[2 + d] = o[i];
  }
}

// Block (x: t · nh + head, y: batch row): merges the splits' records into out.
template <typename E>
__global__ void combine_kernel(ShardParams p, const double* part, int splits) {
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  const int64_t D = p.D, task = blockIdx.x, b = blockIdx.y;
  const int64_t t = task / p.nh, hl = task % p.nh;
  const double* recs = part + (b * p.T * p.nh + task) * splits * (D + 2);
  E* out = static_cast<E*>(p.out) + (b * p.T * p.nh + hl) * D + t * p.nh * D;
  double big = kMinusInf;
  for (int c = 0; c < splits; ++c) big = fmax(big, recs[c * (D + 2)]);
  double total = 0;
  for (int c = 0; c < splits; ++c) {
    const double mc = recs[c * (D + 2)];
    if (mc != kMinusInf) total += ::exp(mc - big) * recs[c * (D + 2) + 1];
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    double acc = 0;
    for (int c = 0; c < splits; ++c) {
      const double mc = recs[c * (D + 2)];
      if (mc != kMinusInf) acc += ::exp(mc - big) * recs[c * (D + 2) + 2 + d];
    }
    out[d] = (big != kMinusInf && total > 0) ? static_cast<E>(acc / total) : E(0);
  }
}

// ---- Host side ----

void run_per_head(const AttentionShardForward& a) {
  const Box& box = a.out->box;
  for (int64_t b = 0; b < box.shape[0]; ++b) {
    for (int64_t h = 0; h < box.shape[2]; ++h) {
      attention_head_forward(DeviceKind::kCuda, attention_head_task(a, b, h));
    }
  }
}

template <int NJ>
void launch_flash(const ShardParams& p, int64_t nb, int64_t id, cudaStream_t s) {
  const int dp = static_cast<int>((p.D + 3) & ~int64_t{3});
  const int ks = (dp / 4) % 2 == 1 ? dp : dp + 4;  // rows 16·k bytes apart, k odd: no conflicts
  const size_t shared = flash_shared_bytes(NJ, ks);
  cuda::check(cudaFuncSetAttribute(flash_kernel<NJ>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(shared)),
              "attention_shard_forward cudaFuncSetAttribute", id);
  const int tiles = static_cast<int>((p.T + kBM - 1) / kBM);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.nh),
                  static_cast<unsigned>(nb));
  flash_kernel<NJ><<<grid, kFlashThreads, shared, s>>>(p, ks, tiles);
  cuda::check_launch("attention_shard_forward", id);
}

template <typename E>
void launch_rows(const ShardParams& p, int64_t nb, int64_t id, cudaStream_t s) {
  // The keys any row sees, split across blocks when there are few (row, head) tasks.
  const int64_t lo = first_of(p, 0, visible_of(p, 0));
  const int64_t hi = visible_of(p, p.T - 1);
  const int64_t keys = hi > lo ? hi - lo : 0;
  const int64_t tasks = nb * p.T * p.nh;
  int64_t splits =
      std::min<int64_t>(kMaxSplits, std::max<int64_t>(1, (keys + kChunk - 1) / kChunk));
  const int64_t record = (p.D + 2) * static_cast<int64_t>(sizeof(double));
  splits = std::min<int64_t>(
      splits, std::max<int64_t>(1, static_cast<int64_t>(kSplitScratchBytes) / (tasks * record)));
  if (tasks >= kEnoughBlocks) splits = 1;  // enough blocks to fill the GPU already
  const int64_t per_split = splits == 1 ? std::max<int64_t>(keys, 1) : (keys + splits - 1) / splits;
  const size_t shared = static_cast<size_t>(p.D + kChunk) * sizeof(double);
  if (shared > 48 * 1024) {
    cuda::check(cudaFuncSetAttribute(row_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(shared)),
                "attention_shard_forward cudaFuncSetAttribute", id);
  }
  const dim3 grid(static_cast<unsigned>(p.T * p.nh), static_cast<unsigned>(splits),
                  static_cast<unsigned>(nb));
  if (splits == 1) {
    row_kernel<E><<<grid, kRowThreads, shared, s>>>(p, nullptr, lo, per_split, 1);
    cuda::check_launch("attention_shard_forward", id);
    return;
  }
  StreamScratch part(static_cast<size_t>(tasks * splits * record), s,
                     "attention_shard_forward scratch", id);
  row_kernel<E><<<grid, kRowThreads, shared, s>>>(p, part.as<double>(), lo, per_split,
                                                  static_cast<int>(splits));
  cuda::check_launch("attention_shard_forward", id);
  combine_kernel<E>
      <<<dim3(static_cast<unsigned>(p.T * p.nh), static_cast<unsigned>(nb)), kRowThreads, 0, s>>>(
          p, part.as<double>(), static_cast<int>(splits));
  cuda::check_launch("attention_shard_forward combine", id);
}

void attention_shard_forward_cuda(const AttentionShardForward& a) {
  const int64_t id = a.out->device_id;
  const Box& box = a.out->box;
  const int64_t nb = box.shape[0], nh = box.shape[2];
  if (nb <= 0 || nh <= 0 || a.T <= 0 || a.D <= 0) return;
  const bool f32 = a.dtype == DType::kF32, f64 = a.dtype == DType::kF64;
  const bool mask_ok = a.key_mask == nullptr || a.mask_dtype == DType::kI32 ||
                       a.mask_dtype == DType::kI64 || a.mask_dtype == DType::kU8 ||
                       a.mask_dtype == DType::kBool;
  const int64_t L = a.L < 0 ? 0 : a.L;
  const bool grid_ok =
      nb <= 65535 && nh <= 65535 && a.T * nh <= int64_t{0x7fffffff} && L <= int64_t{1} << 40;
  const bool flash = f32 && a.T > kDecodeRows && a.D <= kFlashMaxD;
  const bool rows = (f32 || f64) && a.D <= kRowMaxD;
  if (!mask_ok || !grid_ok || !(flash || rows)) {  // the per-head op (or its error)
    run_per_head(a);
    return;
  }
  cudaStream_t s = cuda::enter_device(id);
  ShardParams p{};
  p.q = a.q->buffer.data();
  p.k = a.k->buffer.data();
  p.v = a.v->buffer.data();
  p.out = a.out->buffer.data();
  p.mask = a.key_mask ? a.key_mask->buffer.data() : nullptr;
  p.mask_kind = a.mask_dtype == DType::kI32 ? 0 : (a.mask_dtype == DType::kI64 ? 1 : 2);
  p.T = a.T;
  p.S = a.S;
  p.L = L;
  p.D = a.D;
  p.nh = nh;
  p.nkh = a.k->box.shape[2];
  p.head_offset = box.offset[2];
  p.kv_offset = a.k->box.offset[2];
  p.r = a.r;
  p.causal = a.masking.causal;
  p.query_offset = a.masking.query_offset;
  p.window = a.masking.sliding_window;
  p.scale = a.scale;
  p.cap = a.masking.logit_soft_cap;
  if (flash) {
    if (a.D <= 64) {
      launch_flash<4>(p, nb, id, s);
    } else {
      launch_flash<8>(p, nb, id, s);
    }
  } else if (f32) {
    launch_rows<float>(p, nb, id, s);
  } else {
    launch_rows<double>(p, nb, id, s);
  }
}

}  // namespace
}  // namespace meshlayout::layer_cuda

namespace meshlayout::internal_cuda {

void register_cuda_attention_shard_kernels() {
  attention_shard_forward.define(DeviceKind::kCuda, &layer_cuda::attention_shard_forward_cuda);
}

}  // namespace meshlayout::internal_cuda
