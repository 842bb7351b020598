// attention_backward_kernels.cu — the CUDA implementation of kernels/attention.h's
// attention_head_backward: the gradients of key/value head j of batch row b into dk and dv, and
// dq of the query heads of j's group that dq's box holds, with every option of the forward
// (causal, query offset, sliding window, soft cap, key masks, key_length < S).
//
// As cpu/attention.cc, per query row t of each head i of the group: the scores (q_t·k_s in
// double rounded to E, then scale, mask, cap·tanh(x/cap)), P = exp(x − max)·(1/Σ) in E,
// dP = d_out_t·v_s (rounded to E), δ = Σ P·dP in double, dS = scale·P·(dP − E(δ)) in E (times
// 1 − tanh² under the cap), dq_t = Σ_s dS·k_s; then dv_s = Σ P·d_out and dk_s = Σ dS·q over the
// group's rows. Two kernels: row_kernel, one block per (t, i), writes dq and each row's max, 1/Σ
// and E(δ); key_kernel, one block per key s, recomputes the row's P and dS of key s with the same
// device code (the same bits) and sums dk_s and dv_s in double. Keys in [L, S) get zeros.
#include <algorithm>
#include <limits>
#include <string>

#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cuda/layer_kernel_util.cuh"
#include "meshlayout/kernels/cuda/register.h"

namespace meshlayout::layer_cuda {
namespace {

constexpr size_t kMaxSharedBytes = 160 * 1024;
constexpr int kBackwardThreads = 256;
constexpr int kRowsPerChunk = 128;  // key_kernel's rows per pass

struct BackwardParams {
  int64_t T, L, D, n;  // n: the group's query heads in dq's box
  int64_t q_stride;    // between query rows t and t + 1 of q, d_out, dq (heads · D)
  int64_t kv_stride;   // between keys of k and v (their box's heads · D)
  int64_t dkv_stride;  // between keys of dk and dv
  const void* mask;    // null, or batch row b's first key flag
  int mask_kind;       // 0: I32, 1: I64, 2: U8 or BOOL
  bool causal;
  int64_t query_offset, sliding_window;
};

__device__ __forceinline__ bool kept(const BackwardParams& p, int64_t s) {
  if (p.mask == nullptr) return true;
  switch (p.mask_kind) {
    case 0:
      return static_cast<const int32_t*>(p.mask)[s] != 0;
    case 1:
      return static_cast<const int64_t*>(p.mask)[s] != 0;
    default:
      return static_cast<const uint8_t*>(p.mask)[s] != 0;
  }
}

// Keys [first, visible) of query row t.
__device__ __forceinline__ void key_range(const BackwardParams& p, int64_t t, int64_t* first,
                                          int64_t* visible) {
  int64_t vis = p.L;
  if (p.causal) {
    const int64_t last = t + p.query_offset + 1;
    vis = last < 0 ? 0 : (last < p.L ? last : p.L);
  }
  int64_t f = 0;
  if (p.sliding_window > 0) {
    const int64_t w = t + p.query_offset - p.sliding_window + 1;
    f = w <= 0 ? 0 : (w < vis ? w : vis);
  }
  *first = f;
  *visible = vis;
}

// a·b over D by one warp (lane-strided double sums, then the warp's tree), rounded to E; the
// same on every lane. Both kernels call it, so they see the same scores.
template <typename E>
__device__ __forceinline__ E warp_dot(const E* a, const E* b, int64_t D, int lane) {
  double acc = 0;
  for (int64_t d = lane; d < D; d += 32) acc = add(acc, mul(double(a[d]), double(b[d])));
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return static_cast<E>(acc);
}

// The capped score of key s from its dot product: x·scale (or −∞ masked), cap·tanh(x/cap); th:
// the tanh (0 without a cap).
template <typename E>
__device__ __forceinline__ E score(const BackwardParams& p, int64_t s, E dot, E scale, E cap,
                                   E* th) {
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  E x = kept(p, s) ? mul(dot, scale) : kMinusInf;
  *th = 0;
  if (cap > 0 && x != kMinusInf) {
    *th = tanh_e(div(x, cap));
    x = mul(cap, *th);
  }
  return x;
}

// dS of one key from P, dP, E(δ) and the tanh (as the CPU: scale·P·(dP − δ), times 1 − th²
// under the cap where P is not 0).
template <typename E>
__device__ __forceinline__ E score_grad(E prob, E dp, E fdelta, E th, E scale, E cap) {
  E ds = mul(mul(scale, prob), sub(dp, fdelta));
  if (cap > 0 && prob != E(0)) ds = mul(ds, sub(E(1), mul(th, th)));
  return ds;
}

// One block per (query row t, group head i): dq_t and the row's statistics (max, 1/Σ, E(δ)).
template <typename E>
__global__ void row_kernel(E* dq, E* stats, const E* q, const E* dout, const E* k, const E* v,
                           E* scratch, BackwardParams p, E scale, E cap) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ E reduce_e[32];
  __shared__ double reduce_d[32];
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  const int64_t t = blockIdx.x, i = blockIdx.y, D = p.D, L = p.L;
  const int64_t row_at = t * p.q_stride + i * D;
  int64_t first, visible;
  key_range(p, t, &first, &visible);
  E* qs = reinterpret_cast<E*>(smem);
  E* ds = qs + D;
  const int arrays = cap > 0 ? 3 : 2;
  E* rows = scratch ? scratch + (i * p.T + t) * arrays * L : ds + D;
  E* sc = rows;           // scores, then exp, then P
  E* dr = rows + L;       // dP, then dS
  E* ths = rows + 2 * L;  // the tanh under the cap
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    qs[d] = q[row_at + d];
    ds[d] = dout[row_at + d];
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t s = first + warp; s < visible; s += warps) {
    E th;
    const E x = score(p, s, warp_dot(qs, k + s * p.kv_stride, D, lane), scale, cap, &th);
    const E dp = warp_dot(ds, v + s * p.kv_stride, D, lane);
    if (lane == 0) {
      sc[s] = x;
      dr[s] = dp;
      if (cap > 0) ths[s] = th;
    }
  }
  __syncthreads();
  E m = kMinusInf;
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) m = max_e(m, sc[s]);
  m = block_max(m, reduce_e);
  E* st = stats + (i * p.T + t) * 3;
  if (m == kMinusInf) {  // nothing attended: zero probabilities, zero gradient
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) dq[row_at + d] = E(0);
    if (threadIdx.x == 0) {
      st[0] = kMinusInf;
      st[1] = 0;
      st[2] = 0;
    }
    return;
  }
  double part = 0;
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) {
    const E e = exp_e(sub(sc[s], m));
    sc[s] = e;
    part += double(e);
  }
  const E inv = div(E(1), static_cast<E>(block_sum(part, reduce_d)));
  part = 0;
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) {
    const E prob = mul(sc[s], inv);
    sc[s] = prob;
    part = add(part, mul(double(prob), double(dr[s])));
  }
  const E fdelta = static_cast<E>(block_sum(part, reduce_d));
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) {
    dr[s] = score_grad(sc[s], dr[s], fdelta, cap > 0 ? ths[s] : E(0), scale, cap);
  }
  if (threadIdx.x == 0) {
    st[0] = m;
    st[1] = inv;
    st[2] = fdelta;
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    double acc = 0;
    for (int64_t s = first; s < visible; ++s) {
      acc = add(acc, mul(double(dr[s]), double(k[s * p.kv_stride + d])));
    }
    dq[row_at + d] = static_cast<E>(acc);
  }
}

// One block per key s of [0, S): dv_s = Σ P·d_out and dk_s = Σ dS·q over the group's rows
// (zeros for s >= L), P and dS recomputed from row_kernel's statistics.
template <typename E>
__global__ void key_kernel(E* dk, E* dv, const E* stats, const E* q, const E* dout, const E* k,
                           const E* v, BackwardParams p, E scale, E cap) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  const int64_t s = blockIdx.x, D = p.D, rows = p.n * p.T;
  E* ks = reinterpret_cast<E*>(smem);
  E* vs = ks + D;
  E* pc = vs + D;              // P of the chunk's rows
  E* dc = pc + kRowsPerChunk;  // dS of the chunk's rows
  const bool active = s < p.L;
  if (active) {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      ks[d] = k[s * p.kv_stride + d];
      vs[d] = v[s * p.kv_stride + d];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t d0 = 0; d0 < D; d0 += blockDim.x) {
    const int64_t d = d0 + threadIdx.x;
    double acc_k = 0, acc_v = 0;
    for (int64_t r0 = 0; active && r0 < rows; r0 += kRowsPerChunk) {
      for (int64_t c = warp; c < kRowsPerChunk; c += warps) {
        const int64_t r = r0 + c;  // row r: head i = r / T, query row t = r % T
        E prob = 0, grad = 0;
        if (r < rows) {
          const int64_t i = r / p.T, t = r % p.T;
          int64_t first, visible;
          key_range(p, t, &first, &visible);
          const E* st = stats + r * 3;
          if (s >= first && s < visible && st[0] != kMinusInf) {
            const int64_t row_at = t * p.q_stride + i * D;
            E th;
            const E x = score(p, s, warp_dot(q + row_at, ks, D, lane), scale, cap, &th);
            const E dp = warp_dot(dout + row_at, vs, D, lane);
            prob = mul(exp_e(sub(x, st[0])), st[1]);
            grad = score_grad(prob, dp, st[2], th, scale, cap);
          }
        }
        if (lane == 0) {
          pc[c] = prob;
          dc[c] = grad;
        }
      }
      __syncthreads();
      if (d < D) {
        for (int64_t c = 0; c < kRowsPerChunk && r0 + c < rows; ++c) {
          if (pc[c] == E(0) && dc[c] == E(0)) continue;
          const int64_t r = r0 + c, row_at = (r % p.T) * p.q_stride + (r / p.T) * D;
          acc_v = add(acc_v, mul(double(pc[c]), double(dout[row_at + d])));
          acc_k = add(acc_k, mul(double(dc[c]), double(q[row_at + d])));
        }
      }
      __syncthreads();
    }
    if (d < D) {
      dk[s * p.dkv_stride + d] = static_cast<E>(acc_k);
      dv[s * p.dkv_stride + d] = static_cast<E>(acc_v);
    }
  }
}

template <typename E>
void backward_head(const AttentionHeadBackward& a, cudaStream_t stream) {
  const int64_t id = a.dq->device_id;
  const int64_t T = a.T, S = a.S, D = a.D, L = a.L < 0 ? 0 : a.L, j = a.j, b = a.b;
  if (D <= 0 || S <= 0) return;
  const Box& q_box = a.dq->box;
  const Box& kv_box = a.dk->box;
  const int64_t nh = q_box.shape[2], nkd = kv_box.shape[2], nkh = a.k->box.shape[2];
  const int64_t h0 = std::max(q_box.offset[2], j * a.r);
  const int64_t h1 = std::min(q_box.offset[2] + nh, (j + 1) * a.r);
  const int64_t n = std::max<int64_t>(0, h1 - h0);
  BackwardParams p{};
  p.T = T;
  p.L = L;
  p.D = D;
  p.n = n;
  p.q_stride = nh * D;
  p.kv_stride = nkh * D;
  p.dkv_stride = nkd * D;
  p.causal = a.masking.causal;
  p.query_offset = a.masking.query_offset;
  p.sliding_window = a.masking.sliding_window;
  if (a.key_mask) {
    const std::byte* base = a.key_mask->buffer.data();
    if (a.mask_dtype == DType::kI32) {
      p.mask = reinterpret_cast<const int32_t*>(base) + b * S;
      p.mask_kind = 0;
    } else if (a.mask_dtype == DType::kI64) {
      p.mask = reinterpret_cast<const int64_t*>(base) + b * S;
      p.mask_kind = 1;
    } else if (a.mask_dtype == DType::kU8 || a.mask_dtype == DType::kBool) {
      p.mask = reinterpret_cast<const uint8_t*>(base) + b * S;
      p.mask_kind = 2;
    } else {
      throw ValueError("attention_head_backward on gpu:" + std::to_string(id) +
                       " needs an I32, I64, U8 or BOOL key mask, got " +
                       std::string(dtype_name(a.mask_dtype)));
    }
  }
  const int64_t hl = h0 - q_box.offset[2];  // the group's first head in dq's box
  const E* qp = device_ptr<E>(a.q) + (b * T * nh + hl) * D;
  const E* dop = device_ptr<E>(a.d_out) + (b * T * nh + hl) * D;
  E* dqp = device_ptr<E>(a.dq) + (b * T * nh + hl) * D;
  const E* kp = device_ptr<E>(a.k) + (b * S * nkh + (j - a.k->box.offset[2])) * D;
  const E* vp = device_ptr<E>(a.v) + (b * S * nkh + (j - a.k->box.offset[2])) * D;
  E* dkp = device_ptr<E>(a.dk) + (b * S * nkd + (j - kv_box.offset[2])) * D;
  E* dvp = device_ptr<E>(a.dv) + (b * S * nkd + (j - kv_box.offset[2])) * D;
  const E scale = static_cast<E>(a.scale), cap = static_cast<E>(a.masking.logit_soft_cap);

  StreamScratch stats(static_cast<size_t>(3 * n * T) * sizeof(E), stream,
                      "attention_head_backward scratch", id);
  if (n > 0 && T > 0) {
    const size_t arrays = cap > 0 ? 3 : 2;
    const size_t vec_bytes = 2 * static_cast<size_t>(D) * sizeof(E);
    const size_t row_bytes = arrays * static_cast<size_t>(L) * sizeof(E);
    const bool in_shared = vec_bytes + row_bytes <= kMaxSharedBytes;
    const size_t shared = in_shared ? vec_bytes + row_bytes : vec_bytes;
    if (shared > kMaxSharedBytes) {
      throw ValueError("attention_head_backward on gpu:" + std::to_string(id) + ": head_dim " +
                       std::to_string(D) + " is too large for shared memory");
    }
    if (shared > 48 * 1024) {
      cuda::check(cudaFuncSetAttribute(row_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)),
                  "attention_head_backward cudaFuncSetAttribute", id);
    }
    const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(n));
    if (in_shared) {
      row_kernel<E><<<grid, kBackwardThreads, shared, stream>>>(dqp, stats.as<E>(), qp, dop, kp, vp,
                                                                nullptr, p, scale, cap);
      cuda::check_launch("attention_head_backward", id);
    } else {
      StreamScratch rows(static_cast<size_t>(n * T) * row_bytes, stream,
                         "attention_head_backward scratch", id);
      row_kernel<E><<<grid, kBackwardThreads, shared, stream>>>(dqp, stats.as<E>(), qp, dop, kp, vp,
                                                                rows.as<E>(), p, scale, cap);
      cuda::check_launch("attention_head_backward", id);
    }
  }
  const size_t key_shared = (2 * static_cast<size_t>(D) + 2 * kRowsPerChunk) * sizeof(E);
  if (key_shared > kMaxSharedBytes) {
    throw ValueError("attention_head_backward on gpu:" + std::to_string(id) + ": head_dim " +
                     std::to_string(D) + " is too large for shared memory");
  }
  if (key_shared > 48 * 1024) {
    cuda::check(cudaFuncSetAttribute(key_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(key_shared)),
                "attention_head_backward cudaFuncSetAttribute", id);
  }
  key_kernel<E><<<static_cast<unsigned>(S), kBackwardThreads, key_shared, stream>>>(
      dkp, dvp, stats.as<E>(), qp, dop, kp, vp, p, scale, cap);
  cuda::check_launch("attention_head_backward", id);
}

void attention_head_backward_cuda(const AttentionHeadBackward& a) {
  const int64_t id = a.dq->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_float(a.dtype, "attention_head_backward", id,
                 [&]<typename E>(E*) { backward_head<E>(a, s); });
}

}  // namespace
}  // namespace meshlayout::layer_cuda

namespace meshlayout::internal_cuda {

void register_cuda_attention_backward_kernels() {
  attention_head_backward.define(DeviceKind::kCuda, &layer_cuda::attention_head_backward_cuda);
}

}  // namespace meshlayout::internal_cuda
