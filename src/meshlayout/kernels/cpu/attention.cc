// cpu/attention.cc — the CPU implementation of kernels/attention.h (moved unchanged from
// ops/attention.cc and ops/attention_backward.cc; attention_shard_forward runs the per-head
// forward for each (batch row, head) of the shard in turn).
#include "meshlayout/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/cpu/float_dispatch.h"

namespace meshlayout {

using cpu_kernels::dispatch_float;

namespace {

using cpu_kernels::gemm;
using cpu_kernels::gemm_nt;

template <typename T>
const T* data(const Array::Shard& s) {
  return reinterpret_cast<const T*>(s.buffer.data());
}
template <typename T>
T* data(Array::Shard& s) {
  return reinterpret_cast<T*>(s.buffer.data());
}

// Query rows per block of a causal attention: small enough to skip most of the masked
// triangle, large enough for the BLAS to run near its rate.
constexpr int64_t kCausalBlock = 32;

// Element `index` of a key_mask shard (I32, I64, U8 or BOOL) as an integer.
int64_t mask_value(const Array::Shard& s, DType dtype, int64_t index) {
  const std::byte* p = s.buffer.data();
  switch (dtype) {
    case DType::kI32:
      return reinterpret_cast<const int32_t*>(p)[index];
    case DType::kI64:
      return reinterpret_cast<const int64_t*>(p)[index];
    default:
      return static_cast<int64_t>(reinterpret_cast<const uint8_t*>(p)[index]);
  }
}

template <typename E>
void forward_head(const AttentionHeadForward& a) {
  const int64_t T = a.T, S = a.S, L = a.L, r = a.r, D = a.D;
  const AttentionMasking& options = a.masking;
  Array::Shard& os = *a.out;
  const Array::Shard& qs = *a.q;
  const Array::Shard& ks = *a.k;
  const Array::Shard& vs = *a.v;
  const int64_t nh = os.box.shape[2], nkh = ks.box.shape[2];
  const int64_t kv_head = (os.box.offset[2] + a.h) / r - ks.box.offset[2];
  const E* qp = data<E>(qs) + (a.b * T * nh + a.h) * D;
  const E* kp = data<E>(ks) + (a.b * S * nkh + kv_head) * D;
  const E* vp = data<E>(vs) + (a.b * S * nkh + kv_head) * D;
  E* op = data<E>(os) + (a.b * T * nh + a.h) * D;
  // Query rows in blocks: under a causal mask a block needs only the keys its last row sees,
  // so the scores and the probabilities·values products skip the masked upper triangle.
  const int64_t block = options.causal ? kCausalBlock : T;
  // Scores of one block, reused by the tasks a thread runs (no allocation per task).
  thread_local std::vector<E> scores;
  scores.resize(static_cast<size_t>(std::min(block, T) * L));
  const Array::Shard* ms = a.key_mask;
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  const E fscale = static_cast<E>(a.scale);
  const E fcap = static_cast<E>(options.logit_soft_cap);
  for (int64_t t0 = 0; t0 < T; t0 += block) {
    const int64_t rows = std::min(block, T - t0);
    const int64_t keys =
        options.causal ? std::max<int64_t>(0, std::min(L, t0 + rows + options.query_offset)) : L;
    if (keys == 0) {  // no row of this block sees a key: zeros
      for (int64_t t = t0; t < t0 + rows; ++t)
        std::fill(op + t * nh * D, op + t * nh * D + D, E(0));
      continue;
    }
    E* p = scores.data();
    gemm_nt<E>(rows, keys, D, qp + t0 * nh * D, nh * D, kp, nkh * D, p, keys);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = t0 + i;
      E* row = p + i * keys;
      // Keys past `visible` (causal) are masked: only [0, visible) is scaled and exponentiated.
      const int64_t visible =
          options.causal ? std::max<int64_t>(0, std::min(L, t + options.query_offset + 1)) : L;
      std::fill(row + visible, row + keys, E(0));
      // Keys before the sliding window (s <= position - window) are masked too.
      const int64_t first = attention_window_start(options, t, visible);
      std::fill(row, row + first, kMinusInf);
      E m = kMinusInf;
      if (ms) {
        for (int64_t s = first; s < visible; ++s) {
          row[s] = mask_value(*ms, a.mask_dtype, a.b * S + s) != 0 ? row[s] * fscale : kMinusInf;
          m = std::max(m, row[s]);
        }
      } else {
        for (int64_t s = first; s < visible; ++s) m = std::max(m, row[s] *= fscale);
      }
      if (m == kMinusInf) {  // nothing to attend: zeros
        std::fill(row, row + visible, E(0));
        continue;
      }
      if (fcap > 0) {  // Gemma 2's soft-capping of the scaled scores
        m = kMinusInf;
        for (int64_t s = first; s < visible; ++s) {
          if (row[s] != kMinusInf) row[s] = fcap * std::tanh(row[s] / fcap);
          m = std::max(m, row[s]);
        }
      }
      E sum = 0;
      for (int64_t s = 0; s < visible; ++s) sum += (row[s] = std::exp(row[s] - m));
      const E inv = E(1) / sum;
      for (int64_t s = 0; s < visible; ++s) row[s] *= inv;
    }
    gemm<E>(rows, D, keys, p, keys, vp, nkh * D, op + t0 * nh * D, nh * D);
  }
}

// The gradients of key/value head j (global) of batch row b (local), and dq of the query heads
// in j's group. E: float (F32) or double (F64), every operand's element type.
template <typename E>
void backward_head(const AttentionHeadBackward& a) {
  const int64_t b = a.b, j = a.j;
  const int64_t T = a.T, S = a.S, D = a.D, L = a.L;
  const AttentionMasking& options = a.masking;
  const Box& q_box = a.dq->box;
  const Box& kv_box = a.dk->box;
  const int64_t nh = q_box.shape[2], nkd = kv_box.shape[2];
  const int64_t h0 = std::max(q_box.offset[2], j * a.r);
  const int64_t h1 = std::min(q_box.offset[2] + nh, (j + 1) * a.r);
  const int64_t n = std::max<int64_t>(0, h1 - h0), nT = n * T;
  E* dkp = data<E>(*a.dk) + (b * S * nkd + (j - kv_box.offset[2])) * D;
  E* dvp = data<E>(*a.dv) + (b * S * nkd + (j - kv_box.offset[2])) * D;
  for (int64_t s = L; s < S; ++s) {  // keys past key_length: no gradient
    std::fill(dkp + s * nkd * D, dkp + s * nkd * D + D, E(0));
    std::fill(dvp + s * nkd * D, dvp + s * nkd * D + D, E(0));
  }
  E* dq_base = data<E>(*a.dq) + b * T * nh * D;
  if (L == 0) {
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        E* row = dq_base + (t * nh + h - q_box.offset[2]) * D;
        std::fill(row, row + D, E(0));
      }
    }
    return;
  }
  const Array::Shard& qs = *a.q;
  const Array::Shard& ds = *a.d_out;
  const Array::Shard& ks = *a.k;
  const Array::Shard& vs = *a.v;
  const Array::Shard* ms = a.key_mask;
  const int64_t nkh = ks.box.shape[2];
  const E* kp = data<E>(ks) + (b * S * nkh + (j - ks.box.offset[2])) * D;
  const E* vp = data<E>(vs) + (b * S * nkh + (j - ks.box.offset[2])) * D;

  std::vector<E> p(static_cast<size_t>(T * L)), dp(static_cast<size_t>(T * L));
  // Pᵀ and dSᵀ of the group's heads side by side (L × nT), d_out and q stacked (nT × D): one
  // product each gives dv and dk summed over the group.
  std::vector<E> pt(static_cast<size_t>(L * nT)), dst(static_cast<size_t>(L * nT));
  std::vector<E> doc(static_cast<size_t>(nT * D)), qc(static_cast<size_t>(nT * D));
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  const E scale = static_cast<E>(a.scale);
  const E cap = static_cast<E>(options.logit_soft_cap);
  std::vector<E> tanh_row(cap > 0 ? static_cast<size_t>(L) : 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t hl = h0 + i - q_box.offset[2];
    const E* qp = data<E>(qs) + (b * T * nh + hl) * D;
    const E* dop = data<E>(ds) + (b * T * nh + hl) * D;
    gemm_nt<E>(T, L, D, qp, nh * D, kp, nkh * D, p.data(), L);
    gemm_nt<E>(T, L, D, dop, nh * D, vp, nkh * D, dp.data(), L);
    for (int64_t t = 0; t < T; ++t) {
      E* row = p.data() + t * L;
      E* drow = dp.data() + t * L;
      const int64_t visible =
          options.causal ? std::max<int64_t>(0, std::min(L, t + options.query_offset + 1)) : L;
      std::fill(row + visible, row + L, E(0));
      std::fill(drow + visible, drow + L, E(0));
      const int64_t first = attention_window_start(options, t, visible);  // sliding window
      std::fill(row, row + first, kMinusInf);
      E m = kMinusInf;
      for (int64_t s = first; s < visible; ++s) {
        const bool keep = !ms || mask_value(*ms, a.mask_dtype, b * S + s) != 0;
        row[s] = keep ? row[s] * scale : kMinusInf;
        if (cap > 0 && row[s] != kMinusInf) {  // soft-capping: c = cap·tanh(z/cap), keep tanh
          tanh_row[static_cast<size_t>(s)] = std::tanh(row[s] / cap);
          row[s] = cap * tanh_row[static_cast<size_t>(s)];
        }
        m = std::max(m, row[s]);
      }
      if (m == kMinusInf) {  // nothing attended: zero probabilities, zero gradient
        std::fill(row, row + visible, E(0));
        std::fill(drow, drow + visible, E(0));
        continue;
      }
      E sum = 0;
      for (int64_t s = 0; s < visible; ++s) sum += (row[s] = std::exp(row[s] - m));
      const E inv = E(1) / sum;
      double delta = 0;  // rowsum(P ⊙ dP) = d_out_t · out_t
      for (int64_t s = 0; s < visible; ++s) delta += static_cast<double>(row[s] *= inv) * drow[s];
      const E fdelta = static_cast<E>(delta);
      for (int64_t s = 0; s < visible; ++s) drow[s] = scale * row[s] * (drow[s] - fdelta);
      if (cap > 0) {  // dz = dc · (1 − tanh²(z/cap)); masked keys have P = 0 already
        for (int64_t s = first; s < visible; ++s) {
          const E t = tanh_row[static_cast<size_t>(s)];
          if (row[s] != E(0)) drow[s] *= E(1) - t * t;
        }
      }
    }
    gemm<E>(T, D, L, dp.data(), L, kp, nkh * D, dq_base + hl * D, nh * D);  // dq = dS·k
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t s = 0; s < L; ++s) {
        pt[static_cast<size_t>(s * nT + i * T + t)] = p[static_cast<size_t>(t * L + s)];
        dst[static_cast<size_t>(s * nT + i * T + t)] = dp[static_cast<size_t>(t * L + s)];
      }
      std::memcpy(doc.data() + (i * T + t) * D, dop + t * nh * D,
                  static_cast<size_t>(D) * sizeof(E));
      std::memcpy(qc.data() + (i * T + t) * D, qp + t * nh * D, static_cast<size_t>(D) * sizeof(E));
    }
  }
  // No query head of the group here (n = 0): the products write zeros.
  gemm<E>(L, D, nT, pt.data(), nT, doc.data(), D, dvp, nkd * D);  // dv = Σ Pᵀ·d_out
  gemm<E>(L, D, nT, dst.data(), nT, qc.data(), D, dkp, nkd * D);  // dk = Σ dSᵀ·q
}

template <typename E>
void rotate(const RotateHalf& a) {
  Array::Shard& s = *a.y;
  if (s.box.empty()) return;
  const int64_t nb = s.box.shape[0], nt = s.box.shape[1], nh = s.box.shape[2];
  const int64_t D = s.box.shape[3], half = D / 2;
  const int64_t first = a.first;
  const size_t table = static_cast<size_t>(a.cos->shape()[1] * half);
  const E* cs_data = a.cos->data_as<E>();
  const E* sn_data = a.sin->data_as<E>();
  E* p = data<E>(s);
  for (int64_t b = 0; b < nb; ++b) {
    const size_t k = a.table_of_row.empty() ? 0 : a.table_of_row[static_cast<size_t>(b)];
    for (int64_t t = 0; t < nt; ++t) {
      const E* c = cs_data + k * table + static_cast<size_t>((s.box.offset[1] - first + t) * half);
      const E* si = sn_data + k * table + static_cast<size_t>((s.box.offset[1] - first + t) * half);
      for (int64_t h = 0; h < nh; ++h) {
        E* v = p + ((b * nt + t) * nh + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const E x1 = v[i], x2 = v[i + half];
          v[i] = x1 * c[i] - x2 * si[i];
          v[i + half] = x2 * c[i] + x1 * si[i];
        }
      }
    }
  }
}

}  // namespace

void attention_head_forward_cpu(const AttentionHeadForward& args) {
  dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) { forward_head<E>(args); });
}

void attention_shard_forward_cpu(const AttentionShardForward& args) {
  const Box& box = args.out->box;
  for (int64_t b = 0; b < box.shape[0]; ++b) {
    for (int64_t h = 0; h < box.shape[2]; ++h) {
      attention_head_forward_cpu(attention_head_task(args, b, h));
    }
  }
}

void attention_head_backward_cpu(const AttentionHeadBackward& args) {
  dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) { backward_head<E>(args); });
}

void rotate_half_cpu(const RotateHalf& args) {
  dispatch_float(args.dtype, [&]<typename E>(E* /*tag*/) { rotate<E>(args); });
}

}  // namespace meshlayout
