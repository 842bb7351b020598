// moe_dispatch.cc — see moe_dispatch.h and its NOTE [All-to-all dispatch].
#include "meshlayout/ops/moe_dispatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <exception>
#include <numeric>
#include <optional>
#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/kernels/message_base.h"
#include "meshlayout/kernels/moe.h"

namespace meshlayout::internal_ops {
namespace {

int64_t leading_rows_of(const Box& box) { return box.num_elements() / box.shape.back(); }

// For every row of `inner` (row-major over the leading dimensions), its row index in `outer`
// (a box containing it on those dimensions).
std::vector<int64_t> rows_within(const Box& outer, const Box& inner) {
  const size_t n = inner.shape.size() - 1;
  std::vector<int64_t> out;
  if (leading_rows_of(inner) == 0) return out;
  out.reserve(static_cast<size_t>(leading_rows_of(inner)));
  std::vector<int64_t> stride(n);
  int64_t s = 1, base = 0;
  for (size_t i = n; i-- > 0;) {
    stride[i] = s;
    base += (inner.offset[i] - outer.offset[i]) * s;
    s *= outer.shape[i];
  }
  std::vector<int64_t> idx(n, 0);
  while (true) {
    int64_t r = base;
    for (size_t i = 0; i < n; ++i) r += idx[i] * stride[i];
    out.push_back(r);
    size_t d = n;
    while (d > 0 && ++idx[d - 1] == inner.shape[d - 1]) idx[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

std::vector<int64_t> counting(int64_t from, int64_t count) {
  std::vector<int64_t> out(static_cast<size_t>(count));
  std::iota(out.begin(), out.end(), from);
  return out;
}

// A row move or sum whose buffers are resolved once every staging buffer exists.
struct RowJob {
  const Array::Shard* src = nullptr;
  int src_stage = -1;  // a staging buffer's peer instead of src
  std::vector<int64_t> src_rows;
  Array::Shard* dst = nullptr;
  int dst_stage = -1;  // a staging buffer's peer instead of dst
  std::vector<int64_t> dst_rows;
};

}  // namespace

TokenExchange::TokenExchange(const ShardGeometry& source, const ShardGeometry& tokens,
                             const ShardGeometry& gate, const Array& ids,
                             std::vector<int> dispatch_axes, Runtime& runtime)
    : source_(source),
      tokens_(tokens),
      gate_(gate),
      ids_(ids),
      dispatch_axes_(std::move(dispatch_axes)),
      runtime_(runtime),
      top_k_(ids.shape().back()) {
  std::sort(dispatch_axes_.begin(), dispatch_axes_.end());
  const DeviceMesh& mesh = source_.mesh();
  for (int dim : {0, 2}) {
    for (const std::string& name : gate_.layout().axes()[static_cast<size_t>(dim)].axes()) {
      const int a = *mesh.axis_index(name);
      if (!std::binary_search(dispatch_axes_.begin(), dispatch_axes_.end(), a)) {
        rest_axes_.push_back(a);
      }
    }
  }
  for (int64_t p = 0; p < mesh.size(); ++p) {
    unit_rep_.emplace(std::make_pair(process_of(p), unit_key(p)), p);
    member_rep_.emplace(std::make_pair(process_of(p), member_key(p)), p);
  }
  const int me = runtime_.process_id();
  for (const auto& [key, p] : unit_rep_) {
    if (key.first == me) units_.push_back(Unit{p, {}});
  }
  std::sort(units_.begin(), units_.end(),
            [](const Unit& a, const Unit& b) { return a.position < b.position; });
  for (Unit& u : units_) {
    const std::vector<int64_t>& table = compact_index(u.position, u.position);
    for (int64_t r = 0; r < static_cast<int64_t>(table.size()); ++r) {
      if (table[static_cast<size_t>(r)] >= 0) u.rows.push_back(r);
    }
  }
}

int TokenExchange::process_of(int64_t position) const {
  return runtime_.process_of(source_.mesh().device_ids()[static_cast<size_t>(position)]);
}

std::vector<int64_t> TokenExchange::unit_key(int64_t position) const {
  std::vector<int64_t> key;
  for (int d = 0; d + 1 < tokens_.rank(); ++d) key.push_back(tokens_.block_index(position, d));
  key.push_back(gate_.block_index(position, 0));
  key.push_back(gate_.block_index(position, 2));
  return key;
}

std::vector<int64_t> TokenExchange::member_key(int64_t position) const {
  std::vector<int64_t> key;
  for (int d = 0; d + 1 < source_.rank(); ++d) key.push_back(source_.block_index(position, d));
  const std::vector<int64_t> c = source_.mesh().coords(position);
  for (int a : rest_axes_) key.push_back(c[static_cast<size_t>(a)]);
  return key;
}

std::vector<int64_t> TokenExchange::group_of(int64_t position) const {
  const std::vector<int64_t>& shape = source_.mesh().shape();
  std::vector<int64_t> c = source_.mesh().coords(position);
  for (int a : dispatch_axes_) c[static_cast<size_t>(a)] = 0;
  std::vector<int64_t> out;
  while (true) {
    int64_t p = 0;
    for (size_t a = 0; a < shape.size(); ++a) p = p * shape[a] + c[a];
    out.push_back(p);
    size_t i = dispatch_axes_.size();
    while (i > 0) {
      const auto a = static_cast<size_t>(dispatch_axes_[i - 1]);
      if (++c[a] < shape[a]) break;
      c[a] = 0;
      --i;
    }
    if (i == 0) break;
  }
  return out;
}

const std::vector<int64_t>& TokenExchange::compact_index(int64_t unit_position,
                                                         int64_t local) const {
  const std::vector<int64_t> key = unit_key(unit_position);
  auto it = compact_cache_.find(key);
  if (it != compact_cache_.end()) return it->second;
  const Box experts = gate_.box(unit_position);
  const Box block = tokens_.box(local);
  std::vector<int64_t> routed;
  moe_routed_rows(kind_of(ids_), {.ids = ids_.shard_at(local),
                                  .rows = leading_rows_of(block),
                                  .top_k = top_k_,
                                  .first_expert = experts.offset[0],
                                  .experts = experts.shape[0],
                                  .out = &routed});
  std::vector<int64_t> table(static_cast<size_t>(leading_rows_of(block)), -1);
  for (size_t i = 0; i < routed.size(); ++i) {
    table[static_cast<size_t>(routed[i])] = static_cast<int64_t>(i);
  }
  return compact_cache_.emplace(key, std::move(table)).first->second;
}

TokenExchange::Pairs TokenExchange::pairs(int64_t unit_position, int64_t member,
                                          int64_t local) const {
  const std::vector<int64_t>& table = compact_index(unit_position, local);
  const std::vector<int64_t> rows = rows_within(tokens_.box(local), source_.box(member));
  Pairs out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t c = table[static_cast<size_t>(rows[i])];
    if (c < 0) continue;
    out.member_rows.push_back(static_cast<int64_t>(i));
    out.unit_rows.push_back(c);
  }
  return out;
}

std::vector<Array::Shard> TokenExchange::allocate(int64_t width, size_t element_size) const {
  std::vector<Array::Shard> out;
  std::exception_ptr failure;
  try {
    for (const Unit& u : units_) {
      const int64_t id = source_.mesh().device_ids()[static_cast<size_t>(u.position)];
      const auto rows = static_cast<int64_t>(u.rows.size());
      const size_t bytes = static_cast<size_t>(rows * width) * element_size;
      out.push_back(Array::Shard{u.position, id, Box{{0, 0}, {rows, width}},
                                 DeviceBuffer(runtime_.device(id).memory(), bytes)});
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(runtime_.comm(), failure);
  return out;
}

std::vector<Array::Shard> TokenExchange::gather_local(const Array& table) const {
  const int64_t width = table.shape().back();
  const size_t elem = dtype_size(table.dtype());
  std::vector<Array::Shard> out = allocate(width, elem);
  const DeviceKind kind = kind_of(table);
  runtime_.pool().parallel_for(units_.size(), [&](size_t i) {
    const std::vector<int64_t>& rows = units_[i].rows;
    const std::vector<int64_t> to = counting(0, static_cast<int64_t>(rows.size()));
    moe_copy_rows(kind, {.src = table.shard_at(units_[i].position),
                         .src_rows = rows.data(),
                         .dst = &out[i],
                         .dst_rows = to.data(),
                         .count = static_cast<int64_t>(rows.size()),
                         .row_bytes = static_cast<size_t>(width) * elem});
  });
  return out;
}

namespace {

// Runs row jobs (copies, or sums when `dtype` is set) with their staging buffers resolved; jobs
// with the same destination run in order on one thread.
void run_row_jobs(Runtime& rt, DeviceKind kind, std::vector<RowJob>& jobs,
                  std::map<int, Array::Shard>& send_stage, std::map<int, Array::Shard>& recv_stage,
                  int64_t width, size_t elem, std::optional<DType> dtype) {
  std::map<const void*, std::vector<RowJob*>> by_dst;
  std::vector<std::vector<RowJob*>*> lists;
  for (RowJob& j : jobs) {
    if (j.src_stage >= 0) j.src = &recv_stage.at(j.src_stage);
    if (j.dst_stage >= 0) j.dst = &send_stage.at(j.dst_stage);
    auto [it, fresh] = by_dst.try_emplace(j.dst);
    if (fresh) lists.push_back(&it->second);
    it->second.push_back(&j);
  }
  rt.pool().parallel_for(lists.size(), [&](size_t l) {
    for (const RowJob* j : *lists[l]) {
      const auto count = static_cast<int64_t>(j->src_rows.size());
      if (dtype) {
        moe_add_rows(kind, {.src = j->src,
                            .src_rows = j->src_rows.data(),
                            .dst = j->dst,
                            .dst_rows = j->dst_rows.data(),
                            .count = count,
                            .width = width,
                            .dtype = *dtype});
      } else {
        moe_copy_rows(kind, {.src = j->src,
                             .src_rows = j->src_rows.data(),
                             .dst = j->dst,
                             .dst_rows = j->dst_rows.data(),
                             .count = count,
                             .row_bytes = static_cast<size_t>(width) * elem});
      }
    }
  });
}

// The messages of one exchange: a staging buffer per peer (rows × width), sent whole.
void exchange_stages(Runtime& rt, std::map<int, Array::Shard>& send_stage,
                     std::map<int, Array::Shard>& recv_stage, size_t elem) {
  if (rt.num_processes() == 1) return;
  std::vector<BoxRegion> sends, recvs;
  for (auto& [peer, s] : send_stage) {
    sends.push_back(BoxRegion{peer, message_base(s), s.box, s.box});
  }
  for (auto& [peer, s] : recv_stage) {
    recvs.push_back(BoxRegion{peer, message_base(s), s.box, s.box});
  }
  rt.comm().exchange_boxes(sends, recvs, elem);
}

void make_stages(Runtime& rt, const std::map<int, int64_t>& counts, int64_t width, size_t elem,
                 std::map<int, Array::Shard>& stages) {
  for (const auto& [peer, rows] : counts) {
    if (rows == 0) continue;
    stages.emplace(
        peer, Array::Shard{-1, -1, Box{{0, 0}, {rows, width}},
                           DeviceBuffer(rt.staging(), static_cast<size_t>(rows * width) * elem)});
  }
}

}  // namespace

std::vector<Array::Shard> TokenExchange::dispatch(const Array& rows_source) const {
  const int me = runtime_.process_id();
  const int64_t width = rows_source.shape().back();
  const size_t elem = dtype_size(rows_source.dtype());
  std::vector<Array::Shard> out = allocate(width, elem);
  std::map<int64_t, size_t> unit_index;
  for (size_t i = 0; i < units_.size(); ++i) unit_index[units_[i].position] = i;
  std::vector<RowJob> packs, moves;
  std::map<int, int64_t> send_rows, recv_rows;
  std::vector<int64_t> reps;
  for (const auto& [key, q] : unit_rep_) reps.push_back(q);
  std::sort(reps.begin(), reps.end());
  for (int64_t q : reps) {
    const int pq = process_of(q);
    for (int64_t m : group_of(q)) {
      const int pm = process_of(m);
      if (pm != me && pq != me) continue;
      Pairs pr = pairs(q, m, pq == me ? q : m);
      const auto n = static_cast<int64_t>(pr.member_rows.size());
      if (n == 0) continue;
      if (pm == me && pq == me) {
        moves.push_back(RowJob{.src = rows_source.shard_at(m),
                               .src_rows = std::move(pr.member_rows),
                               .dst = &out[unit_index.at(q)],
                               .dst_rows = std::move(pr.unit_rows)});
      } else if (pm == me) {
        packs.push_back(RowJob{.src = rows_source.shard_at(m),
                               .src_rows = std::move(pr.member_rows),
                               .dst_stage = pq,
                               .dst_rows = counting(send_rows[pq], n)});
        send_rows[pq] += n;
      } else {
        moves.push_back(RowJob{.src_stage = pm,
                               .src_rows = counting(recv_rows[pm], n),
                               .dst = &out[unit_index.at(q)],
                               .dst_rows = std::move(pr.unit_rows)});
        recv_rows[pm] += n;
      }
    }
  }
  std::map<int, Array::Shard> send_stage, recv_stage;
  make_stages(runtime_, send_rows, width, elem, send_stage);
  make_stages(runtime_, recv_rows, width, elem, recv_stage);
  const DeviceKind kind = kind_of(rows_source);
  run_row_jobs(runtime_, kind, packs, send_stage, recv_stage, width, elem, std::nullopt);
  exchange_stages(runtime_, send_stage, recv_stage, elem);
  run_row_jobs(runtime_, kind, moves, send_stage, recv_stage, width, elem, std::nullopt);
  return out;
}

void TokenExchange::combine(const std::vector<Array::Shard>& outputs, LocalPartials& sinks,
                            int64_t width, DType dtype) const {
  const int me = runtime_.process_id();
  const size_t elem = dtype_size(dtype);
  const DeviceKind kind = kind_of(ids_);
  for (LocalPartial& s : sinks) fill_scalar(kind, {.shard = &s, .dtype = dtype, .value = 0.0f});
  std::map<std::vector<int64_t>, LocalPartial*> sink_of;
  for (LocalPartial& s : sinks) sink_of[member_key(s.position)] = &s;
  std::map<int64_t, size_t> unit_index;
  for (size_t i = 0; i < units_.size(); ++i) unit_index[units_[i].position] = i;
  std::vector<RowJob> packs, sums;
  std::map<int, int64_t> send_rows, recv_rows;
  std::vector<int64_t> members;
  for (const auto& [key, p] : member_rep_) members.push_back(p);
  std::sort(members.begin(), members.end());
  for (int64_t m : members) {
    const int pm = process_of(m);
    for (int64_t q : group_of(m)) {
      const int pq = process_of(q);
      if (pm != me && pq != me) continue;
      const int64_t u = unit_rep_.at({pq, unit_key(q)});
      Pairs pr = pairs(u, m, pq == me ? u : m);
      const auto n = static_cast<int64_t>(pr.member_rows.size());
      if (n == 0) continue;
      if (pm == me && pq == me) {
        sums.push_back(RowJob{.src = &outputs[unit_index.at(u)],
                              .src_rows = std::move(pr.unit_rows),
                              .dst = sink_of.at(member_key(m)),
                              .dst_rows = std::move(pr.member_rows)});
      } else if (pq == me) {
        packs.push_back(RowJob{.src = &outputs[unit_index.at(u)],
                               .src_rows = std::move(pr.unit_rows),
                               .dst_stage = pm,
                               .dst_rows = counting(send_rows[pm], n)});
        send_rows[pm] += n;
      } else {
        sums.push_back(RowJob{.src_stage = pq,
                              .src_rows = counting(recv_rows[pq], n),
                              .dst = sink_of.at(member_key(m)),
                              .dst_rows = std::move(pr.member_rows)});
        recv_rows[pq] += n;
      }
    }
  }
  std::map<int, Array::Shard> send_stage, recv_stage;
  make_stages(runtime_, send_rows, width, elem, send_stage);
  make_stages(runtime_, recv_rows, width, elem, recv_stage);
  run_row_jobs(runtime_, kind, packs, send_stage, recv_stage, width, elem, std::nullopt);
  exchange_stages(runtime_, send_stage, recv_stage, elem);
  run_row_jobs(runtime_, kind, sums, send_stage, recv_stage, width, elem, dtype);
}

}  // namespace meshlayout::internal_ops
