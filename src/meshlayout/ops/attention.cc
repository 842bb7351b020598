#include "meshlayout/ops/attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/attention.h"
#include "meshlayout/kernels/cpu/blas.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/ops/attention_internal.h"

namespace meshlayout {
namespace {

using internal_ops::in_layout;
using internal_ops::RotaryDirection;

}  // namespace

namespace internal_ops {

const Array& in_layout(const Array& a, const TensorLayout& layout, std::optional<Array>& storage) {
  if (a.layout() == layout) return a;
  storage.emplace(distribute_tensor(a, layout));
  return *storage;
}

AttentionMasking masking_of(const AttentionOptions& o) {
  return {.causal = o.causal,
          .query_offset = o.query_offset,
          .sliding_window = o.sliding_window,
          .logit_soft_cap = o.logit_soft_cap};
}

void check_attention(std::string_view op, const Array& q, const Array& k, const Array& v,
                     const Array* d_out, const AttentionOptions& o) {
  const auto shapes = [&] {
    return fmt::format("q {}, k {}, v {}", shape_to_string(q.shape()), shape_to_string(k.shape()),
                       shape_to_string(v.shape()));
  };
  if (q.shape().size() != 4 || k.shape().size() != 4 || v.shape() != k.shape()) {
    throw ValueError(
        fmt::format("{} needs q (batch, seq, heads, head_dim) and k, v (batch, keys, "
                    "kv_heads, head_dim) of equal shapes, got {}",
                    op, shapes()));
  }
  if ((q.dtype() != DType::kF32 && q.dtype() != DType::kF64) || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype() || (d_out && d_out->dtype() != q.dtype())) {
    const std::string d_out_dtype =
        d_out ? fmt::format(", d_out {}", dtype_name(d_out->dtype())) : "";
    throw ValueError(fmt::format("{} runs on F32 or F64, one dtype for all, got q {}, k {}, v {}{}",
                                 op, dtype_name(q.dtype()), dtype_name(k.dtype()),
                                 dtype_name(v.dtype()), d_out_dtype));
  }
  if (q.shape()[0] != k.shape()[0] || q.shape()[3] != k.shape()[3]) {
    throw ValueError(
        fmt::format("{}: q and k must agree on batch and head_dim, got {}", op, shapes()));
  }
  if (k.shape()[2] == 0 || q.shape()[2] % k.shape()[2] != 0) {
    throw ValueError(
        fmt::format("{}: the query heads ({}) must be a multiple of the key/value "
                    "heads ({}), got {}",
                    op, q.shape()[2], k.shape()[2], shapes()));
  }
  if (d_out && d_out->shape() != q.shape()) {
    throw ValueError(fmt::format("{}: d_out must have q's shape {}, got d_out {} ({})", op,
                                 shape_to_string(q.shape()), shape_to_string(d_out->shape()),
                                 shapes()));
  }
  if (o.key_length < -1 || o.key_length > k.shape()[1]) {
    throw ValueError(fmt::format("{}: key_length {} is outside [0, {}] (the keys of k {})", op,
                                 o.key_length, k.shape()[1], shape_to_string(k.shape())));
  }
  if (!(o.logit_soft_cap >= 0) || !std::isfinite(o.logit_soft_cap)) {
    throw ValueError(
        fmt::format("{}: logit_soft_cap must be >= 0 (0: none), got {}", op, o.logit_soft_cap));
  }
  if (o.sliding_window < 0) {
    throw ValueError(fmt::format("{}: sliding_window must be >= 0 (0: no window), got {}", op,
                                 o.sliding_window));
  }
  if (o.query_offset < 0) {
    throw ValueError(fmt::format("{}: query_offset must be >= 0, got {}", op, o.query_offset));
  }
  if (d_out) {
    if (!(q.mesh() == k.mesh()) || !(q.mesh() == v.mesh()) || !(q.mesh() == d_out->mesh())) {
      throw ValueError(
          fmt::format("{}: q, k, v and d_out must be on one mesh, got {}, {}, {} "
                      "and {}",
                      op, q.mesh().to_string(), k.mesh().to_string(), v.mesh().to_string(),
                      d_out->mesh().to_string()));
    }
  } else if (!(q.mesh() == k.mesh()) || !(q.mesh() == v.mesh())) {
    throw ValueError(fmt::format("{}: q, k and v must be on one mesh, got {}, {} and {}", op,
                                 q.mesh().to_string(), k.mesh().to_string(), v.mesh().to_string()));
  }
  if (o.key_mask) {
    const Array& m = *o.key_mask;
    const DType d = m.dtype();
    if (m.shape() != Shape{k.shape()[0], k.shape()[1]} ||
        !(d == DType::kI32 || d == DType::kI64 || d == DType::kU8 || d == DType::kBool)) {
      throw ValueError(
          fmt::format("{}: key_mask must be (batch, keys) = {} of I32, I64, U8 or "
                      "BOOL, got {} {}",
                      op, shape_to_string({k.shape()[0], k.shape()[1]}), shape_to_string(m.shape()),
                      dtype_name(d)));
    }
    if (!(m.mesh() == q.mesh())) {
      throw ValueError(fmt::format("{}: key_mask is on {}, q on {}", op, m.mesh().to_string(),
                                   q.mesh().to_string()));
    }
  }
}

}  // namespace internal_ops

TensorLayout attention_kv_layout(const TensorLayout& q_layout, int64_t query_heads,
                                 int64_t kv_heads, bool* heads_replicated) {
  const DeviceMesh& mesh = *q_layout.device_mesh();
  const DimSharding& head_axes = q_layout.axes()[2];
  int64_t blocks = 1;
  for (const std::string& a : head_axes.axes()) blocks *= mesh.axis_size(a);
  const int64_t r = query_heads / kv_heads;
  bool aligned = true;
  for (int64_t i = 0; i < blocks && aligned; ++i) {
    const auto [qs, qe] = block_range(query_heads, blocks, i);
    const auto [ks, ke] = block_range(kv_heads, blocks, i);
    aligned = (qs == qe && ks == ke) || (qs == ks * r && qe == ke * r);
  }
  if (heads_replicated) *heads_replicated = head_axes.is_sharded() && !aligned;
  return TensorLayout({q_layout.axes()[0], None, aligned ? head_axes : DimSharding(), None}, mesh);
}

Array attention(const Array& q, const Array& k, const Array& v, const AttentionOptions& options) {
  internal_ops::check_attention("attention", q, k, v, nullptr, options);
  const int64_t T = q.shape()[1], Hq = q.shape()[2], D = q.shape()[3];
  const int64_t S = k.shape()[1], Hkv = k.shape()[2], r = Hq / Hkv;
  const int64_t L = options.key_length < 0 ? S : options.key_length;
  const double scale =
      options.scale != 0.0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(D));

  const TensorLayout q_layout({q.layout().axes()[0], None, q.layout().axes()[2], None}, q.mesh());
  const TensorLayout kv_layout = attention_kv_layout(q_layout, Hq, Hkv);
  std::optional<Array> q_store, k_store, v_store, m_store;
  const Array& qt = in_layout(q, q_layout, q_store);
  const Array& kt = in_layout(k, kv_layout, k_store);
  const Array& vt = in_layout(v, kv_layout, v_store);
  const Array* mt = options.key_mask
                        ? &in_layout(*options.key_mask,
                                     TensorLayout({q_layout.axes()[0], None}, q.mesh()), m_store)
                        : nullptr;
  Array out = allocate_agreed(q_layout, q.shape(), q.dtype(), q.runtime_ptr());
  const DeviceKind kind = kind_of(out);
  const AttentionMasking masking = internal_ops::masking_of(options);

  if (kind != DeviceKind::kCpu) {
    // A device kind runs every (batch row, query head) of a shard in one op: one or a few
    // launches per shard instead of one per head.
    out.runtime().pool().parallel_for(out.local_shards().size(), [&](size_t i) {
      Array::Shard& os = out.local_shards()[i];
      if (os.box.empty()) return;
      attention_shard_forward(kind, {.out = &os,
                                     .q = qt.shard_at(os.position),
                                     .k = kt.shard_at(os.position),
                                     .v = vt.shard_at(os.position),
                                     .key_mask = mt ? mt->shard_at(os.position) : nullptr,
                                     .mask_dtype = mt ? mt->dtype() : DType::kI32,
                                     .T = T,
                                     .S = S,
                                     .L = L,
                                     .r = r,
                                     .D = D,
                                     .scale = scale,
                                     .masking = masking,
                                     .dtype = out.dtype()});
    });
    return out;
  }

  // One task per (local shard, batch row, query head) of the output.
  struct Task {
    size_t shard;
    int64_t b, h;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < out.local_shards().size(); ++i) {
    const Box& box = out.local_shards()[i].box;
    for (int64_t b = 0; b < box.shape[0]; ++b) {
      for (int64_t h = 0; h < box.shape[2]; ++h) tasks.push_back({i, b, h});
    }
  }
  cpu_kernels::use_single_threaded_blas();
  out.runtime().pool().parallel_for(tasks.size(), [&](size_t n) {
    const Task& task = tasks[n];
    Array::Shard& os = out.local_shards()[task.shard];
    attention_head_forward(kind, {.out = &os,
                                  .q = qt.shard_at(os.position),
                                  .k = kt.shard_at(os.position),
                                  .v = vt.shard_at(os.position),
                                  .key_mask = mt ? mt->shard_at(os.position) : nullptr,
                                  .mask_dtype = mt ? mt->dtype() : DType::kI32,
                                  .b = task.b,
                                  .h = task.h,
                                  .T = T,
                                  .S = S,
                                  .L = L,
                                  .r = r,
                                  .D = D,
                                  .scale = scale,
                                  .masking = masking,
                                  .dtype = out.dtype()});
  });
  return out;
}

namespace {

void check_rotary(const Array& x, int64_t start_position, std::span<const int64_t> row_starts,
                  const Rope& rope, RotaryDirection direction) {
  const bool backward = direction == RotaryDirection::kBackward;
  const std::string_view op = backward ? "rotary embedding backward" : "rotary embedding";
  if (x.shape().size() != 4 || (x.dtype() != DType::kF32 && x.dtype() != DType::kF64) ||
      x.shape()[3] % 2 != 0) {
    throw ValueError(fmt::format(
        "{} needs an F32 or F64 (batch, seq, heads, head_dim) {} with an even "
        "head_dim, got {} {}",
        op, backward ? "gradient" : "tensor", shape_to_string(x.shape()), dtype_name(x.dtype())));
  }
  if (!(rope.theta > 0) || start_position < 0) {
    throw ValueError(fmt::format("{} needs theta > 0 and start_position >= 0, got {} and {}", op,
                                 rope.theta, start_position));
  }
  if (!row_starts.empty() && static_cast<int64_t>(row_starts.size()) != x.shape()[0]) {
    throw ValueError(fmt::format("{} needs one start position per batch row: {} rows in {}, got {}",
                                 op, x.shape()[0], shape_to_string(x.shape()), row_starts.size()));
  }
  rope.validate();
}

// Rotates y (head_dim whole on every device) in place by +angle, (x1·cos − x2·sin,
// x2·cos + x1·sin), or backward by −angle, (x1·cos + x2·sin, x2·cos − x1·sin), the transpose of
// the forward's rotation (the sines negated: the same floats as writing the signs out).
// E: float (F32, the cos and sin rounded to float) or double (F64): the tables' element type.
// With row_starts (one per batch row), row b is rotated at positions row_starts[b] + t instead.
template <typename E>
void rotate_in_place(Array& y, int64_t start_position, std::span<const int64_t> row_starts,
                     const Rope& rope, RotaryDirection direction) {
  const bool backward = direction == RotaryDirection::kBackward;
  const Array& x = y;
  const int64_t D = x.shape()[3], half = D / 2;
  // cos and sin of every position the local shards hold, computed once per distinct start
  // and shared by the shards.
  int64_t first = x.shape()[1], last = 0;
  std::vector<int64_t> starts;  // the distinct starts of the local rows, sorted
  for (const Array::Shard& s : y.local_shards()) {
    if (s.box.empty()) continue;
    first = std::min(first, s.box.offset[1]);
    last = std::max(last, s.box.offset[1] + s.box.shape[1]);
    for (int64_t b = 0; b < s.box.shape[0] && !row_starts.empty(); ++b) {
      starts.push_back(row_starts[static_cast<size_t>(s.box.offset[0] + b)]);
    }
  }
  if (row_starts.empty()) starts.push_back(start_position);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  const int64_t positions = std::max<int64_t>(0, last - first);
  const size_t table = static_cast<size_t>(positions * half);
  const Shape table_shape{static_cast<int64_t>(starts.size()), positions, half};
  HostTensor cos_table(y.dtype(), table_shape), sin_table(y.dtype(), table_shape);
  E* cs = cos_table.data_as<E>();
  E* sn = sin_table.data_as<E>();
  const std::vector<double> inverse_frequencies = rope.inverse_frequencies(D);
  for (size_t k = 0; k < starts.size(); ++k) {
    for (int64_t i = 0; i < half; ++i) {  // angle in double, rotation in E
      const double inv_freq = inverse_frequencies[static_cast<size_t>(i)];
      for (int64_t t = 0; t < positions; ++t) {
        const double angle = static_cast<double>(starts[k] + first + t) * inv_freq;
        const E sine = static_cast<E>(std::sin(angle));
        cs[k * table + static_cast<size_t>(t * half + i)] = static_cast<E>(std::cos(angle));
        sn[k * table + static_cast<size_t>(t * half + i)] = backward ? -sine : sine;
      }
    }
  }
  const DeviceKind kind = kind_of(y);
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t n) {
    Array::Shard& s = y.local_shards()[n];
    if (s.box.empty()) return;
    std::vector<size_t> table_of_row;  // each local batch row's table (row_starts given)
    for (int64_t b = 0; b < s.box.shape[0] && !row_starts.empty(); ++b) {
      table_of_row.push_back(static_cast<size_t>(
          std::lower_bound(starts.begin(), starts.end(),
                           row_starts[static_cast<size_t>(s.box.offset[0] + b)]) -
          starts.begin()));
    }
    rotate_half(kind, {.y = &s,
                       .cos = &cos_table,
                       .sin = &sin_table,
                       .table_of_row = table_of_row,
                       .first = first,
                       .dtype = y.dtype()});
  });
}

void rotate_in_place(Array& y, int64_t start_position, std::span<const int64_t> row_starts,
                     const Rope& rope, RotaryDirection direction) {
  if (y.dtype() == DType::kF32) {
    rotate_in_place<float>(y, start_position, row_starts, rope, direction);
  } else {
    rotate_in_place<double>(y, start_position, row_starts, rope, direction);
  }
}

}  // namespace

namespace internal_ops {

Array rotary_embedding(const Array& x, int64_t start_position, const Rope& rope,
                       RotaryDirection direction, std::span<const int64_t> row_starts) {
  check_rotary(x, start_position, row_starts, rope, direction);
  std::vector<DimSharding> axes = x.layout().axes();
  axes[3] = DimSharding();
  Array y = distribute_tensor(x, TensorLayout(axes, x.mesh()));
  rotate_in_place(y, start_position, row_starts, rope, direction);
  return y;
}

Array rotary_embedding(Array&& x, int64_t start_position, const Rope& rope,
                       RotaryDirection direction, std::span<const int64_t> row_starts) {
  check_rotary(x, start_position, row_starts, rope, direction);
  if (x.layout().axes()[3].is_sharded()) {
    return rotary_embedding(static_cast<const Array&>(x), start_position, rope, direction,
                            row_starts);
  }
  Array y = std::move(x);
  rotate_in_place(y, start_position, row_starts, rope, direction);
  return y;
}

}  // namespace internal_ops

Array apply_rotary_embedding(const Array& x, int64_t start_position, const Rope& rope) {
  return internal_ops::rotary_embedding(x, start_position, rope, RotaryDirection::kForward);
}

Array apply_rotary_embedding(Array&& x, int64_t start_position, const Rope& rope) {
  return internal_ops::rotary_embedding(std::move(x), start_position, rope,
                                        RotaryDirection::kForward);
}

Array apply_rotary_embedding(const Array& x, std::span<const int64_t> row_starts,
                             const Rope& rope) {
  if (row_starts.empty()) {
    throw ValueError(
        fmt::format("rotary embedding needs one start position per batch row: {} "
                    "rows in {}, got none",
                    x.shape().empty() ? 0 : x.shape()[0], shape_to_string(x.shape())));
  }
  return internal_ops::rotary_embedding(x, 0, rope, RotaryDirection::kForward, row_starts);
}

Array apply_rotary_embedding(Array&& x, std::span<const int64_t> row_starts, const Rope& rope) {
  if (row_starts.empty())
    return apply_rotary_embedding(static_cast<const Array&>(x), row_starts, rope);
  return internal_ops::rotary_embedding(std::move(x), 0, rope, RotaryDirection::kForward,
                                        row_starts);
}

}  // namespace meshlayout
