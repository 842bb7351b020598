// attention_kernels.cu — the CUDA implementations of kernels/attention.h's
// attention_head_forward (one (batch row, head) per call: causal or not, grouped-query heads,
// query offset for decoding against a key/value cache, sliding window, logit soft-capping, scale,
// key masks of I32/I64/U8/BOOL) and rotate_half (the rotary embedding with the host's cos/sin
// tables, uploaded as they are: the same E values, so the same bits as the CPU).
//
// attention_head_forward runs one block per query row t: a warp per key computes q_t·k_s (in
// double, rounded to E as the CPU's BLAS product), then as cpu/attention.cc: masked keys −∞,
// scores·scale in E, the max, the optional soft cap cap·tanh(x/cap), exp(x − max) in E, their
// sum (in double, rounded to E), probabilities = e·(1/sum) in E, and out_t = Σ p_s·v_s (in
// double, rounded to E). Rows that see no key get zeros. The scores live in shared memory, or in
// a stream-ordered scratch block when a row of L keys does not fit.
#include <algorithm>
#include <limits>
#include <string>

#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cuda/layer_kernel_util.cuh"
#include "meshlayout/kernels/cuda/register.h"

namespace meshlayout::layer_cuda {
namespace {

// Shared memory one block may use for a row's scores and q (H100: 227 KiB opt-in).
constexpr size_t kMaxSharedBytes = 160 * 1024;
constexpr int kAttentionThreads = 256;

struct AttentionParams {
  int64_t T, L, D;
  int64_t q_stride;   // elements between query rows t and t + 1 (heads · D)
  int64_t kv_stride;  // elements between keys s and s + 1 (kv heads · D)
  const void* mask;   // null, or batch row b's first key flag
  int mask_kind;      // 0: I32, 1: I64, 2: U8 or BOOL
  bool causal;
  int64_t query_offset, sliding_window;
};

__device__ __forceinline__ bool key_kept(const AttentionParams& p, int64_t s) {
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

template <typename E>
__global__ void attention_row_kernel(E* out, const E* q, const E* k, const E* v, E* scratch,
                                     AttentionParams p, E scale, E cap) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ E reduce_e[32];
  __shared__ double reduce_d[32];
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  const int64_t t = blockIdx.x;
  const int64_t D = p.D, L = p.L;
  E* o = out + t * p.q_stride;
  int64_t visible = L;
  if (p.causal) {
    const int64_t last = t + p.query_offset + 1;
    visible = last < 0 ? 0 : (last < L ? last : L);
  }
  int64_t first = 0;  // attention_window_start
  if (p.sliding_window > 0) {
    const int64_t f = t + p.query_offset - p.sliding_window + 1;
    first = f <= 0 ? 0 : (f < visible ? f : visible);
  }
  E* qs = reinterpret_cast<E*>(smem);
  E* sc = scratch ? scratch + t * L : qs + D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = q[t * p.q_stride + d];
  __syncthreads();

  // Scores of the keys in [first, visible): a warp per key.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int64_t s = first + warp; s < visible; s += warps) {
    const E* ks = k + s * p.kv_stride;
    double acc = 0;
    for (int64_t d = lane; d < D; d += 32) acc = add(acc, mul(double(qs[d]), double(ks[d])));
    acc = warp_sum(acc);
    if (lane == 0) sc[s] = key_kept(p, s) ? mul(static_cast<E>(acc), scale) : kMinusInf;
  }
  __syncthreads();
  E m = kMinusInf;
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) m = max_e(m, sc[s]);
  m = block_max(m, reduce_e);
  if (m == kMinusInf) {  // nothing to attend (or no key visible): zeros
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = E(0);
    return;
  }
  if (cap > 0) {  // soft-capping of the scaled scores, then the max again
    m = kMinusInf;
    for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) {
      if (sc[s] != kMinusInf) sc[s] = mul(cap, tanh_e(div(sc[s], cap)));
      m = max_e(m, sc[s]);
    }
    m = block_max(m, reduce_e);
  }
  double part = 0;
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) {
    const E e = exp_e(sub(sc[s], m));
    sc[s] = e;
    part += double(e);
  }
  const E sum = static_cast<E>(block_sum(part, reduce_d));
  const E inv = div(E(1), sum);
  for (int64_t s = first + threadIdx.x; s < visible; s += blockDim.x) sc[s] = mul(sc[s], inv);
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    double acc = 0;
    for (int64_t s = first; s < visible; ++s) {
      acc = add(acc, mul(double(sc[s]), double(v[s * p.kv_stride + d])));
    }
    o[d] = static_cast<E>(acc);
  }
}

template <typename E>
void forward_head(const AttentionHeadForward& a, cudaStream_t s) {
  const int64_t id = a.out->device_id;
  const Array::Shard& os = *a.out;
  const Array::Shard& ks = *a.k;
  const int64_t T = a.T, S = a.S, L = a.L, D = a.D;
  if (T <= 0 || D <= 0) return;
  const int64_t nh = os.box.shape[2], nkh = ks.box.shape[2];
  const int64_t kv_head = (os.box.offset[2] + a.h) / a.r - ks.box.offset[2];
  AttentionParams p{};
  p.T = T;
  p.L = L < 0 ? 0 : L;
  p.D = D;
  p.q_stride = nh * D;
  p.kv_stride = nkh * D;
  p.causal = a.masking.causal;
  p.query_offset = a.masking.query_offset;
  p.sliding_window = a.masking.sliding_window;
  if (a.key_mask) {
    const std::byte* base = a.key_mask->buffer.data();
    switch (a.mask_dtype) {
      case DType::kI32:
        p.mask = reinterpret_cast<const int32_t*>(base) + a.b * S;
        p.mask_kind = 0;
        break;
      case DType::kI64:
        p.mask = reinterpret_cast<const int64_t*>(base) + a.b * S;
        p.mask_kind = 1;
        break;
      case DType::kU8:
      case DType::kBool:
        p.mask = reinterpret_cast<const uint8_t*>(base) + a.b * S;
        p.mask_kind = 2;
        break;
      default:
        throw ValueError("attention_head_forward on gpu:" + std::to_string(id) +
                         " needs an I32, I64, U8 or BOOL key mask, got " +
                         std::string(dtype_name(a.mask_dtype)));
    }
  }
  const E* qp = device_ptr<E>(a.q) + (a.b * T * nh + a.h) * D;
  const E* kp = device_ptr<E>(a.k) + (a.b * S * nkh + kv_head) * D;
  const E* vp = device_ptr<E>(a.v) + (a.b * S * nkh + kv_head) * D;
  E* op = device_ptr<E>(a.out) + (a.b * T * nh + a.h) * D;
  const size_t q_bytes = static_cast<size_t>(D) * sizeof(E);
  const size_t row_bytes = static_cast<size_t>(p.L) * sizeof(E);
  const bool in_shared = q_bytes + row_bytes <= kMaxSharedBytes;
  const size_t shared = in_shared ? q_bytes + row_bytes : q_bytes;
  if (shared > kMaxSharedBytes) {
    throw ValueError("attention_head_forward on gpu:" + std::to_string(id) + ": head_dim " +
                     std::to_string(D) + " is too large for a query row in shared memory");
  }
  if (shared > 48 * 1024) {
    cuda::check(
        cudaFuncSetAttribute(attention_row_kernel<E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "attention_head_forward cudaFuncSetAttribute", id);
  }
  const E scale = static_cast<E>(a.scale), cap = static_cast<E>(a.masking.logit_soft_cap);
  const unsigned blocks = static_cast<unsigned>(T);
  if (in_shared) {
    attention_row_kernel<E>
        <<<blocks, kAttentionThreads, shared, s>>>(op, qp, kp, vp, nullptr, p, scale, cap);
    cuda::check_launch("attention_head_forward", id);
  } else {
    StreamScratch scores(static_cast<size_t>(T) * row_bytes, s, "attention_head_forward scratch",
                         id);
    attention_row_kernel<E>
        <<<blocks, kAttentionThreads, shared, s>>>(op, qp, kp, vp, scores.as<E>(), p, scale, cap);
    cuda::check_launch("attention_head_forward", id);
  }
}

void attention_head_forward_cuda(const AttentionHeadForward& a) {
  const int64_t id = a.out->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_float(a.dtype, "attention_head_forward", id,
                 [&]<typename E>(E*) { forward_head<E>(a, s); });
}

// ---- Rotary embedding ----

// Each (b, t, h, i < half): (x1, x2) = (v[i], v[i + half]) becomes (x1·c − x2·s, x2·c + x1·s),
// c and s row t of batch row b's table slice (b_stride 0: one slice for every row).
template <typename E>
__global__ void rotate_kernel(E* y, const E* cs, const E* sn, int64_t nb, int64_t nt, int64_t nh,
                              int64_t D, int64_t b_stride) {
  const int64_t half = D / 2, total = nb * nt * nh * half;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = k % half;
    int64_t rest = k / half;
    const int64_t h = rest % nh;
    rest /= nh;
    const int64_t t = rest % nt, b = rest / nt;
    const int64_t at = b * b_stride + t * half + i;
    const E c = cs[at], sv = sn[at];
    E* v = y + ((b * nt + t) * nh + h) * D;
    const E x1 = v[i], x2 = v[i + half];
    v[i] = sub(mul(x1, c), mul(x2, sv));
    v[i + half] = add(mul(x2, c), mul(x1, sv));
  }
}

template <typename E>
void rotate(const RotateHalf& a, cudaStream_t s) {
  Array::Shard& y = *a.y;
  const int64_t id = y.device_id;
  if (y.box.empty()) return;
  const int64_t nb = y.box.shape[0], nt = y.box.shape[1], nh = y.box.shape[2];
  const int64_t D = y.box.shape[3], half = D / 2;
  if (half == 0) return;
  const int64_t positions = a.cos->shape()[1];
  const int64_t row0 = y.box.offset[1] - a.first;  // the shard's first row in each table
  if (row0 < 0 || row0 + nt > positions) {
    throw ValueError("rotate_half on gpu:" + std::to_string(id) + ": the shard's sequence rows [" +
                     std::to_string(y.box.offset[1]) + ", " + std::to_string(y.box.offset[1] + nt) +
                     ") are not in the tables' " + std::to_string(positions) + " positions from " +
                     std::to_string(a.first));
  }
  const size_t table = static_cast<size_t>(positions * half);
  const size_t slice = static_cast<size_t>(nt * half);  // one table's rows of the shard
  const int64_t slices = a.table_of_row.empty() ? 1 : nb;
  StreamScratch tables(2 * static_cast<size_t>(slices) * slice * sizeof(E), s,
                       "rotate_half scratch", id);
  E* dc = tables.as<E>();
  E* ds = dc + static_cast<size_t>(slices) * slice;
  const E* hc = a.cos->data_as<E>();
  const E* hs = a.sin->data_as<E>();
  for (int64_t b = 0; b < slices; ++b) {
    const size_t k = a.table_of_row.empty() ? 0 : a.table_of_row[static_cast<size_t>(b)];
    const size_t from = k * table + static_cast<size_t>(row0 * half);
    // Through page-locked slots: a pageable upload would make the host wait for the stream.
    cuda::upload_async(dc + b * slice, hc + from, slice * sizeof(E), id, s);
    cuda::upload_async(ds + b * slice, hs + from, slice * sizeof(E), id, s);
  }
  const int64_t total = nb * nt * nh * half;
  rotate_kernel<E><<<grid_for(total), kThreads, 0, s>>>(
      device_ptr<E>(&y), dc, ds, nb, nt, nh, D,
      a.table_of_row.empty() ? 0 : static_cast<int64_t>(slice));
  cuda::check_launch("rotate_half", id);
}

void rotate_half_cuda(const RotateHalf& a) {
  const int64_t id = a.y->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_float(a.dtype, "rotate_half", id, [&]<typename E>(E*) { rotate<E>(a, s); });
}

}  // namespace
}  // namespace meshlayout::layer_cuda

namespace meshlayout::internal_cuda {

void register_cuda_attention_kernels() {
  attention_head_forward.define(DeviceKind::kCuda, &layer_cuda::attention_head_forward_cuda);
  rotate_half.define(DeviceKind::kCuda, &layer_cuda::rotate_half_cuda);
}

}  // namespace meshlayout::internal_cuda
