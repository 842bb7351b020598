// partial_sum.h — completing the partial sums of a matmul whose contracted dimension is split
// over mesh axes: each device's local product is one K block's share of an output block, and
// the shares are summed into the blocks of a target layout (internal to the ops module).
//
// NOTE [Partial sums]
// Every output block of the target layout that a process holds is computed once per process
// (its first device holding that block is the primary; the others receive the same tile
// while it is hot in cache). For a target block T and each product block P meeting it, the
// piece T ∩ P sums, for every non-empty K block kb, the partial of (P, kb) held by the device
// whose coordinates on the axes no operand uses (the compute replicas) are the target's: its
// reduction group, GSPMD-style. The summands are grouped by the process holding them:
//   - a process sums its own summands in-process first (thread pool), then
//   - sends that one sum per piece to the process of the target with
//     Communicator::exchange_boxes (a lone summand goes straight from its partial buffer; a
//     sum of several is staged in one piece-sized buffer), and
//   - the target's process adds the per-process sums in ascending process order.
// The order of additions is fixed by the plan (process ascending, then K block ascending), so
// every replica of a block within a reduction group gets bit-identical values, whichever
// process computes it. Costs, for a block of E bytes summed over G devices in p processes:
//   - in-process: every summand read once, the block written once per local replica;
//   - across processes (direct): the target's process receives (p - 1) × E, which is the
//     optimum for a reduce-scatter (E = the scattered block) and matches a ring all-reduce for
//     p = 2. For an all-reduce over p > 2 processes, direct costs (p - 1) × E against
//     2 (p - 1) / p × E for a ring, so matmul then reduce-scatters into a layout that also
//     splits an output dimension over the contracted axes and all-gathers with a reshard:
//     2 (p - 1) / p × E per process, the bandwidth optimum (MatmulPlan::all_reduce_in_two_steps).
// The world-wide Communicator::all_reduce_sum is not used: meshlayout's groups are subsets of
// the processes, and padding a world-wide buffer with zeros for the groups a process is not in
// would send (groups / groups-per-process) times the data.
// Memory: each device holds its partial (its product block) until the sum is done; staging
// holds the pieces a process sends (when it sums several) and receives.
//
// Example (matmul.cc):
//   PartialLayout layout{product_geometry, k_axes, K};
//   ReductionPlan plan = plan_reduction(layout, out.geometry(), elem, rt.local_device_count());
//   reduce_partials(layout, partials, plan, out);
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout::internal_ops {

/// Where the partial sums come from: the product geometry (output shape, the layout of the local
/// products, in which the contracted axes hold replicas) and the split of K.
struct PartialLayout {
  ShardGeometry product;
  std::vector<int> k_axes;  // mesh axis indices K is split over, major first
  int64_t k_extent = 0;     // K

  int64_t k_blocks() const;
  /// The K block the device at `position` multiplies.
  int64_t k_block_of(int64_t position) const;
  bool k_block_empty(int64_t kb) const;
  /// The product block (index per output dim) of the device at `position`.
  std::vector<int64_t> product_block_of(int64_t position) const;
};

/// The summands of a piece held by one process: the partials of these K blocks (ascending).
struct Term {
  int process;
  std::vector<int64_t> k_blocks;
};

/// A region of one target block and what is summed into it, in order.
struct Piece {
  int64_t target;              // mesh position of the primary device of the target block
  int process;                 // its process
  std::vector<int64_t> block;  // the product block the piece lies in
  Box box;                     // global coordinates
  std::vector<Term> terms;     // ascending process; empty: the piece is zero (K is empty)
};

struct ReductionPlan {
  std::vector<Piece> pieces;  // in message order (the same on every process)
  /// (replica position, primary position): devices holding a block their process computes on
  /// its primary.
  std::vector<std::pair<int64_t, int64_t>> replicas;
  /// The most processes whose summands one target block draws on.
  int max_processes = 0;
};

/// The reduction into the blocks of `target` (same mesh and shape as `partials.product`).
/// Pieces are cut below 1 GiB so every message's count fits MPI's int.
ReductionPlan plan_reduction(const PartialLayout& partials, const ShardGeometry& target,
                             size_t element_size, int64_t local_device_count);

/// This process's partials: one per distinct (product block, K block) it holds, a shard of the
/// product (position, device, box, buffer) charged to the first local device holding it, which
/// kernels (kernels/) fill as they fill any shard.
struct LocalPartial : Array::Shard {
  std::vector<int64_t> block;
  int64_t k_block;
};
using LocalPartials = std::vector<LocalPartial>;

/// One uninitialised buffer per distinct (product block, contracted block) that a local device
/// of `operand` computes, charged to that device (replicas of a block share one). Allocation
/// failures are agreed across processes (agree_on_failure) before returning. Collective.
LocalPartials allocate_local_partials(const PartialLayout& layout, const Array& operand,
                                      size_t element_size);

/// Runs `plan`: sums the partials into `out` (allocated under the plan's target layout).
/// Collective over out's runtime. See NOTE [Partial sums].
void reduce_partials(const LocalPartials& partials, const ReductionPlan& plan, Array& out);

}  // namespace meshlayout::internal_ops
