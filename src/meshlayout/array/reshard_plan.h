// reshard_plan.h — which bytes move where when a tensor changes layout. Pure: layouts in,
// transfers out; every process computes the same plan from the same replicated metadata.
//
// NOTE [Reshard plan]: each destination box is cut along the source's block grid; a piece
// whose block already sits on the destination device is kept (a local copy); any other piece
// is moved once, from one holder of its block chosen in this order: a holder in the same
// process (no communication), then the holder with the fewest bytes sent so far (balances
// replicas), then the lowest mesh position. Pieces of distinct blocks never overlap, so each
// missing byte moves exactly once and bytes_moved equals minimum_bytes.
//
// Example:
//   ReshardPlan plan = plan_reshard(src.geometry(), dst_geometry, /*element_size=*/4,
//                                   /*local_device_count=*/8);
//   plan.bytes_moved == plan.minimum_bytes;
//   std::cout << plan.summary();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {

/// One piece of a destination, copied from one source shard.
struct Transfer {
  int64_t src_position;  // in the source mesh
  int64_t src_device;    // global device id
  int src_process;
  int64_t dst_index;   // destination index: target mesh position, or process for a gather
  int64_t dst_device;  // global device id; -1 for a host buffer
  int dst_process;
  Box box;  // global coordinates
  int64_t bytes;
  bool kept() const { return src_device == dst_device; }
};

/// Where a destination box lives.
struct Destination {
  int64_t index;
  int64_t device;  // -1 for host memory
  int process;
  Box box;
};

struct ReshardPlan {
  std::vector<Transfer> transfers;  // ordered by destination, then source block (row-major)
  int64_t bytes_moved = 0;          // between different devices (or device → host)
  int64_t bytes_kept = 0;           // already on the destination device
  int64_t minimum_bytes = 0;        // destination bytes not already on their device
  int64_t bytes_between_processes = 0;
  std::string pattern;  // identity, local slice, all-gather, all-to-all, general

  /// A few lines: pattern, transfer count, bytes moved / minimum / kept.
  std::string summary() const;
  /// summary() plus one line per transfer.
  std::string to_string() const;
};

/// The plan from `src` to the boxes of `dst`. `local_device_count` maps device ids to
/// processes (process = id / local_device_count). ValueError if the meshes do not span the
/// same devices or the shapes differ.
ReshardPlan plan_reshard(const ShardGeometry& src, const ShardGeometry& dst, size_t element_size,
                         int64_t local_device_count);

/// plan_reshard(src, dst, …).bytes_moved without building the transfers: the destination bytes
/// not already on their device (NOTE [Reshard plan]: every missing byte moves exactly once), in
/// O(devices). For planners pricing many candidate layouts on large meshes. ValueError as
/// plan_reshard for different shapes.
int64_t reshard_bytes_moved(const ShardGeometry& src, const ShardGeometry& dst,
                            size_t element_size);

/// The plan from `src` to arbitrary destinations (used by gather: one host box per process).
ReshardPlan plan_to_destinations(const ShardGeometry& src, const std::vector<Destination>& dsts,
                                 size_t element_size, int64_t local_device_count);

}  // namespace meshlayout
