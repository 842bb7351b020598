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
#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/ops/attention_internal.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout {
namespace {

using internal_ops::in_layout;
using internal_ops::rotary_embedding;
using internal_ops::RotaryDirection;

std::vector<int64_t> block_of(const ShardGeometry& g, int64_t position) {
  std::vector<int64_t> block(static_cast<size_t>(g.rank()));
  for (int d = 0; d < g.rank(); ++d) block[static_cast<size_t>(d)] = g.block_index(position, d);
  return block;
}

// Where one distinct q block of this process is computed: its dq shard, and the dk/dv shards
// (of kv_layout, or partials) holding the key/value heads of its box.
struct Unit {
  Array::Shard* dq;
  Array::Shard* dk;
  Array::Shard* dv;
  std::vector<int64_t> replicas;  // other local positions holding the same q block
};

}  // namespace

AttentionGrads attention_backward(const Array& q, const Array& k, const Array& v,
                                  const Array& d_out, const AttentionOptions& options) {
  internal_ops::check_attention("attention_backward", q, k, v, &d_out, options);
  const int64_t Hq = q.shape()[2], D = q.shape()[3], S = k.shape()[1], Hkv = k.shape()[2];
  const double scale =
      options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const int64_t T = q.shape()[1], L = options.key_length < 0 ? S : options.key_length;
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
    Unit u{&s, nullptr, nullptr, {}};
    if (heads_replicated) {
      const std::vector<int64_t> block = partial_layout->product_block_of(s.position);
      const int64_t kb = partial_layout->k_block_of(s.position);
      for (size_t i = 0; i < dk_parts.size(); ++i) {
        if (dk_parts[i].block == block && dk_parts[i].k_block == kb) {
          u.dk = &dk_parts[i];
          u.dv = &dv_parts[i];
        }
      }
      // An empty query-head block has no partial (u.dk stays null): nothing to compute.
    } else {
      u.dk = dk_full->shard_at(s.position);
      u.dv = dv_full->shard_at(s.position);
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
    const Box& kv_box = u.dk->box;
    for (int64_t b = 0; b < kv_box.shape[0]; ++b) {
      for (int64_t j = 0; j < kv_box.shape[2]; ++j) tasks.push_back({i, b, kv_box.offset[2] + j});
    }
  }
  cpu_kernels::use_single_threaded_blas();
  const DeviceKind kind = kind_of(dq);
  const AttentionMasking masking = internal_ops::masking_of(options);
  rt.pool().parallel_for(tasks.size(), [&](size_t n) {
    const Task& t = tasks[n];
    const Unit& u = units[t.unit];
    const int64_t position = u.dq->position;
    attention_head_backward(kind, {.dq = u.dq,
                                   .dk = u.dk,
                                   .dv = u.dv,
                                   .q = qt.shard_at(position),
                                   .d_out = dot.shard_at(position),
                                   .k = kt.shard_at(position),
                                   .v = vt.shard_at(position),
                                   .key_mask = mt ? mt->shard_at(position) : nullptr,
                                   .mask_dtype = mt ? mt->dtype() : DType::kI32,
                                   .b = t.b,
                                   .j = t.j,
                                   .T = T,
                                   .S = S,
                                   .D = D,
                                   .L = L,
                                   .r = Hq / Hkv,
                                   .scale = scale,
                                   .masking = masking,
                                   .dtype = dtype});
  });
  for (const Unit& u : units) {  // replicas of a block get the primary's bytes
    for (int64_t position : u.replicas) {
      const auto copy = [&](Array::Shard* to, const Array::Shard* from) {
        copy_runs(kind, {.dst = to,
                         .src = from,
                         .run_bytes = static_cast<size_t>(to->box.num_elements()) * elem});
      };
      copy(dq.shard_at(position), u.dq);
      if (heads_replicated) continue;
      copy(dk_full->shard_at(position), u.dk);
      copy(dv_full->shard_at(position), u.dv);
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
