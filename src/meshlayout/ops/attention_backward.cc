#include "meshlayout/ops/attention_backward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/ops/attention_internal.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout {
namespace {

using cpu_kernels::gemm;
using cpu_kernels::gemm_nt;
using internal_ops::in_layout;
using internal_ops::mask_value;
using internal_ops::rotary_embedding;
using internal_ops::RotaryDirection;
using internal_ops::window_start;

template <typename E>
const E* data(const Array::Shard& s) {
  return reinterpret_cast<const E*>(s.buffer.data());
}
template <typename E>
E* data(std::byte* p) {
  return reinterpret_cast<E*>(p);
}

std::vector<int64_t> block_of(const ShardGeometry& g, int64_t position) {
  std::vector<int64_t> block(static_cast<size_t>(g.rank()));
  for (int d = 0; d < g.rank(); ++d) block[static_cast<size_t>(d)] = g.block_index(position, d);
  return block;
}

// Where one distinct q block of this process is computed: its dq shard, and the dk/dv buffers
// (a kv_layout shard or a partial) holding the key/value heads of `kv_box`.
struct Unit {
  int64_t position;
  std::byte* dq;
  Box q_box;
  std::byte* dk;
  std::byte* dv;
  Box kv_box;
  std::vector<int64_t> replicas;  // other local positions holding the same q block
};

struct Dims {
  int64_t T, S, D, L, r;
  double scale;
  const AttentionOptions* options;
};

// The gradients of key/value head j (global) of batch row b (local) of `u`, and dq of the
// unit's query heads in j's group. E: float (F32) or double (F64), every operand's element type.
template <typename E>
void backward_task(const Unit& u, int64_t b, int64_t j, const Dims& d, const Array& qt,
                   const Array& dot, const Array& kt, const Array& vt, const Array* mt) {
  const int64_t T = d.T, S = d.S, D = d.D, L = d.L;
  const int64_t nh = u.q_box.shape[2], nkd = u.kv_box.shape[2];
  const int64_t h0 = std::max(u.q_box.offset[2], j * d.r);
  const int64_t h1 = std::min(u.q_box.offset[2] + nh, (j + 1) * d.r);
  const int64_t n = std::max<int64_t>(0, h1 - h0), nT = n * T;
  E* dkp = data<E>(u.dk) + (b * S * nkd + (j - u.kv_box.offset[2])) * D;
  E* dvp = data<E>(u.dv) + (b * S * nkd + (j - u.kv_box.offset[2])) * D;
  for (int64_t s = L; s < S; ++s) {  // keys past key_length: no gradient
    std::fill(dkp + s * nkd * D, dkp + s * nkd * D + D, E(0));
    std::fill(dvp + s * nkd * D, dvp + s * nkd * D + D, E(0));
  }
  E* dq_base = data<E>(u.dq) + b * T * nh * D;
  if (L == 0) {
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        E* row = dq_base + (t * nh + h - u.q_box.offset[2]) * D;
        std::fill(row, row + D, E(0));
      }
    }
    return;
  }
  const Array::Shard& qs = *qt.shard_at(u.position);
  const Array::Shard& ds = *dot.shard_at(u.position);
  const Array::Shard& ks = *kt.shard_at(u.position);
  const Array::Shard& vs = *vt.shard_at(u.position);
  const Array::Shard* ms = mt ? mt->shard_at(u.position) : nullptr;
  const int64_t nkh = ks.box.shape[2];
  const E* kp = data<E>(ks) + (b * S * nkh + (j - ks.box.offset[2])) * D;
  const E* vp = data<E>(vs) + (b * S * nkh + (j - ks.box.offset[2])) * D;

  std::vector<E> p(static_cast<size_t>(T * L)), dp(static_cast<size_t>(T * L));
  // Pᵀ and dSᵀ of the group's heads side by side (L × nT), d_out and q stacked (nT × D): one
  // product each gives dv and dk summed over the group.
  std::vector<E> pt(static_cast<size_t>(L * nT)), dst(static_cast<size_t>(L * nT));
  std::vector<E> doc(static_cast<size_t>(nT * D)), qc(static_cast<size_t>(nT * D));
  constexpr E kMinusInf = -std::numeric_limits<E>::infinity();
  const E scale = static_cast<E>(d.scale);
  const E cap = static_cast<E>(d.options->logit_soft_cap);
  std::vector<E> tanh_row(cap > 0 ? static_cast<size_t>(L) : 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t hl = h0 + i - u.q_box.offset[2];
    const E* qp = data<E>(qs) + (b * T * nh + hl) * D;
    const E* dop = data<E>(ds) + (b * T * nh + hl) * D;
    gemm_nt<E>(T, L, D, qp, nh * D, kp, nkh * D, p.data(), L);
    gemm_nt<E>(T, L, D, dop, nh * D, vp, nkh * D, dp.data(), L);
    for (int64_t t = 0; t < T; ++t) {
      E* row = p.data() + t * L;
      E* drow = dp.data() + t * L;
      const int64_t visible =
          d.options->causal ? std::max<int64_t>(0, std::min(L, t + d.options->query_offset + 1))
                            : L;
      std::fill(row + visible, row + L, E(0));
      std::fill(drow + visible, drow + L, E(0));
      const int64_t first = window_start(*d.options, t, visible);  // sliding window: masked keys
      std::fill(row, row + first, kMinusInf);
      E m = kMinusInf;
      for (int64_t s = first; s < visible; ++s) {
        const bool keep = !ms || mask_value(*ms, mt->dtype(), b * S + s) != 0;
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

}  // namespace

AttentionGrads attention_backward(const Array& q, const Array& k, const Array& v,
                                  const Array& d_out, const AttentionOptions& options) {
  internal_ops::check_attention("attention_backward", q, k, v, &d_out, options);
  const int64_t Hq = q.shape()[2], D = q.shape()[3], S = k.shape()[1], Hkv = k.shape()[2];
  const double scale =
      options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const Dims dims{q.shape()[1], S,     D,       options.key_length < 0 ? S : options.key_length,
                  Hq / Hkv,     scale, &options};
  const DeviceMesh& mesh = q.mesh();
  Runtime& rt = q.runtime();

  const TensorLayout q_layout({q.layout().axes()[0], None, q.layout().axes()[2], None}, mesh);
  bool heads_replicated = false;
  const TensorLayout kv_layout = attention_kv_layout(q_layout, Hq, Hkv, &heads_replicated);
  std::optional<Array> q_store, d_store, k_store, v_store, m_store;
  const Array& qt = in_layout(q, q_layout, q_store);
  const Array& dot = in_layout(d_out, q_layout, d_store);
  const Array& kt = in_layout(k, kv_layout, k_store);
  const Array& vt = in_layout(v, kv_layout, v_store);
  const Array* mt =
      options.key_mask
          ? &in_layout(*options.key_mask, TensorLayout({q_layout.axes()[0], None}, mesh), m_store)
          : nullptr;
  const DType dtype = q.dtype();
  const size_t elem = dtype_size(dtype);
  Array dq = allocate_agreed(q_layout, q.shape(), dtype, q.runtime_ptr());

  // dk and dv: complete blocks in kv_layout, or (heads replicated) partial sums over the head
  // axes, one per distinct (batch block, query-head block) of the process.
  std::optional<Array> dk_full, dv_full;
  std::optional<internal_ops::PartialLayout> partial_layout;
  internal_ops::LocalPartials dk_parts, dv_parts;
  if (heads_replicated) {
    std::vector<int> head_axes;
    for (const std::string& a : q_layout.axes()[2].axes()) head_axes.push_back(*mesh.axis_index(a));
    partial_layout.emplace(
        internal_ops::PartialLayout{ShardGeometry(kv_layout, k.shape()), head_axes, Hq});
    dk_parts = internal_ops::allocate_local_partials(*partial_layout, qt, elem);
    dv_parts = internal_ops::allocate_local_partials(*partial_layout, qt, elem);
  } else {
    dk_full.emplace(allocate_agreed(kv_layout, k.shape(), dtype, q.runtime_ptr()));
    dv_full.emplace(allocate_agreed(kv_layout, k.shape(), dtype, q.runtime_ptr()));
  }

  std::vector<Unit> units;
  std::map<std::vector<int64_t>, size_t> first;  // q block → unit
  for (Array::Shard& s : dq.local_shards()) {
    auto [it, added] = first.emplace(block_of(dq.geometry(), s.position), units.size());
    if (!added) {
      units[it->second].replicas.push_back(s.position);
      continue;
    }
    Unit u{s.position, s.buffer.data(), s.box, nullptr, nullptr, {}, {}};
    if (heads_replicated) {
      const std::vector<int64_t> block = partial_layout->product_block_of(s.position);
      const int64_t kb = partial_layout->k_block_of(s.position);
      for (size_t i = 0; i < dk_parts.size(); ++i) {
        if (dk_parts[i].block == block && dk_parts[i].k_block == kb) {
          u.dk = dk_parts[i].buffer.data();
          u.dv = dv_parts[i].buffer.data();
          u.kv_box = dk_parts[i].box;
        }
      }
      // An empty query-head block has no partial (u.dk stays null): nothing to compute.
    } else {
      Array::Shard* ks = dk_full->shard_at(s.position);
      u.dk = ks->buffer.data();
      u.dv = dv_full->shard_at(s.position)->buffer.data();
      u.kv_box = ks->box;
    }
    units.push_back(std::move(u));
  }
  // One task per (unit, batch row, key/value head): a head's dk and dv rows have one writer.
  struct Task {
    size_t unit;
    int64_t b, j;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    if (u.dk == nullptr) continue;
    for (int64_t b = 0; b < u.kv_box.shape[0]; ++b) {
      for (int64_t j = 0; j < u.kv_box.shape[2]; ++j)
        tasks.push_back({i, b, u.kv_box.offset[2] + j});
    }
  }
  cpu_kernels::use_single_threaded_blas();
  rt.pool().parallel_for(tasks.size(), [&](size_t n) {
    const Task& t = tasks[n];
    if (dtype == DType::kF32) {
      backward_task<float>(units[t.unit], t.b, t.j, dims, qt, dot, kt, vt, mt);
    } else {
      backward_task<double>(units[t.unit], t.b, t.j, dims, qt, dot, kt, vt, mt);
    }
  });
  for (const Unit& u : units) {  // replicas of a block get the primary's bytes
    for (int64_t position : u.replicas) {
      const size_t bytes = dq.shard_at(position)->buffer.size();
      if (bytes > 0) std::memcpy(dq.shard_at(position)->buffer.data(), u.dq, bytes);
      if (heads_replicated) continue;
      for (Array* a : {&*dk_full, &*dv_full}) {
        Array::Shard* s = a->shard_at(position);
        const std::byte* src = a == &*dk_full ? u.dk : u.dv;
        if (s->buffer.size() > 0) std::memcpy(s->buffer.data(), src, s->buffer.size());
      }
    }
  }

  const auto finish = [&](std::optional<Array>& full, const internal_ops::LocalPartials& parts,
                          const Array& like) {
    if (!heads_replicated) {
      if (full->layout() == like.layout()) return std::move(*full);
      return distribute_tensor(*full, like.layout());
    }
    Array out = allocate_agreed(like.layout(), like.shape(), dtype, q.runtime_ptr());
    const internal_ops::ReductionPlan plan = internal_ops::plan_reduction(
        *partial_layout, out.geometry(), elem, rt.local_device_count());
    internal_ops::reduce_partials(parts, plan, out);
    return out;
  };
  Array dk = finish(dk_full, dk_parts, k);
  dk_parts.clear();
  Array dv = finish(dv_full, dv_parts, v);
  dv_parts.clear();
  if (!(dq.layout() == q.layout())) dq = distribute_tensor(dq, q.layout());
  return AttentionGrads{std::move(dq), std::move(dk), std::move(dv)};
}

Array apply_rotary_embedding_backward(const Array& dy, int64_t start_position, const Rope& rope) {
  return rotary_embedding(dy, start_position, rope, RotaryDirection::kBackward);
}

Array apply_rotary_embedding_backward(Array&& dy, int64_t start_position, const Rope& rope) {
  return rotary_embedding(std::move(dy), start_position, rope, RotaryDirection::kBackward);
}

}  // namespace meshlayout
