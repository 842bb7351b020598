// moe_dispatch.h — the all-to-all token dispatcher of a mixture of experts (internal to the ops
// module; ops/moe.cc uses it when the tokens are split over mesh axes that also split the
// experts or their F columns).
//
// NOTE [All-to-all dispatch]
// Terms. The tokens lie in x's layout with d whole (the source layout; its blocks are the
// "members"). The dispatch axes A are the mesh axes that split both the tokens and the experts
// (or F). A device's group is the set of devices that share its coordinates on every axis but A:
// together the group's members hold the group's token block (the tokens layout: x's layout
// without the expert and F axes), each row once. A unit is what one device computes: its expert
// block × F block on the rows of its token block routed to at least one expert of the block.
// Every process computes each distinct unit of its devices once (on the first device holding
// it, by position).
//   1. Dispatch: a unit's rows come from the group members that hold them, in ascending row
//      order (a compact rows × width buffer on the unit's device). Rows between devices of one
//      process are copied; between processes, each pair of processes exchanges one message of
//      all its rows (Communicator::exchange_boxes). Only routed rows move: a token goes to the
//      devices holding its top-k experts, not to every device of the group.
//   2. The unit runs its experts on its compact rows (kernels/moe.h).
//   3. Combine: each member (a partial of x's layout over the remaining expert/F axes, one per
//      process as ops/partial_sum.h allocates them) sums the outputs of its group's units for
//      its rows, units in ascending position order, then ops/partial_sum.h completes the sums
//      over the remaining axes into the output layout.
// Both sides of every message compute its rows from the routing ids, which every device holds
// for its whole token block (gathered: k integers per token), so no counts are exchanged and no
// row is sent that is not routed. The order of every sum is fixed by positions, so replicas are
// bit-identical whichever process computes them.
//
// Example (ops/moe.cc):
//   TokenExchange exchange(source_geometry, tokens_geometry, gate_geometry, ids_in_groups,
//                          dispatch_axes, runtime);
//   std::vector<Array::Shard> rows = exchange.dispatch(x_in_source_layout);
//   … kernels on rows[i] for exchange.units()[i] …
//   exchange.combine(outputs, sinks, d, dtype);   // sinks: allocate_local_partials(…)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/ops/partial_sum.h"

namespace meshlayout::internal_ops {

class TokenExchange {
 public:
  /// One unit of this process: its device's mesh position and the rows of its token block
  /// (row-major over the leading dimensions of the block's box) routed to its experts, ascending.
  struct Unit {
    int64_t position;
    std::vector<int64_t> rows;
  };

  /// source: the tokens' layout (x's, d whole); tokens: the groups' layout (source without the
  /// expert and F axes); gate: the gate kernel's (E, d, F) geometry with d whole; ids: the
  /// routing ids (…, top_k) I32 in the tokens layout; dispatch_axes: the mesh axes in A.
  TokenExchange(const ShardGeometry& source, const ShardGeometry& tokens, const ShardGeometry& gate,
                const Array& ids, std::vector<int> dispatch_axes, Runtime& runtime);

  const std::vector<Unit>& units() const { return units_; }

  /// One uninitialised (rows × width) buffer per unit, charged to the unit's device; allocation
  /// failures agreed across processes. Collective.
  std::vector<Array::Shard> allocate(int64_t width, size_t element_size) const;

  /// Each unit's rows of `rows_source` (an array in the source layout, or any array whose
  /// leading dimensions are laid out so): one (rows × last dim) buffer per unit, charged to the
  /// unit's device. Collective.
  std::vector<Array::Shard> dispatch(const Array& rows_source) const;

  /// `rows` of `table` (an array in the tokens layout, e.g. the routing ids or weights) gathered
  /// per unit from the unit's own device. Local.
  std::vector<Array::Shard> gather_local(const Array& table) const;

  /// Zero-fills `sinks` (partials of the source layout's leading blocks over the expert/F axes
  /// not in A: allocate_local_partials), then adds every unit's `outputs` (rows × width, in
  /// units() order) into the sinks of its group, in the order of NOTE [All-to-all dispatch].
  /// Collective.
  void combine(const std::vector<Array::Shard>& outputs, LocalPartials& sinks, int64_t width,
               DType dtype) const;

 private:
  // Key of a unit: its token blocks, expert block and F block.
  std::vector<int64_t> unit_key(int64_t position) const;
  // Key of a member: its source blocks (leading dimensions) and the coordinates of the expert/F
  // axes not in A.
  std::vector<int64_t> member_key(int64_t position) const;
  // The group of `position`: its coordinates with every combination of A, ascending.
  std::vector<int64_t> group_of(int64_t position) const;
  int process_of(int64_t position) const;
  // For the unit of `unit_position` and the member at `member`, using the ids this process
  // holds at `local` (a device of the same group): the member's rows routed to the unit (row
  // indices in the member's box) and their indices in the unit's compact rows, both ascending.
  struct Pairs {
    std::vector<int64_t> member_rows, unit_rows;
  };
  Pairs pairs(int64_t unit_position, int64_t member, int64_t local) const;
  // The compact index of every row of a token block for a unit (−1: not routed), cached.
  const std::vector<int64_t>& compact_index(int64_t unit_position, int64_t local) const;

  ShardGeometry source_, tokens_, gate_;
  const Array& ids_;
  std::vector<int> dispatch_axes_;
  std::vector<int> rest_axes_;  // expert/F axes not in A
  Runtime& runtime_;
  int64_t top_k_;
  std::vector<Unit> units_;
  // (process, unit key) → the position computing it; (process, member key) → primary member.
  std::map<std::pair<int, std::vector<int64_t>>, int64_t> unit_rep_, member_rep_;
  mutable std::map<std::vector<int64_t>, std::vector<int64_t>> compact_cache_;
};

}  // namespace meshlayout::internal_ops
