// box_ops.h — arithmetic on Boxes (see shard_geometry.h) and copying a region between
// row-major buffers that hold different boxes of the same tensor.
//
// Example: a device holding rows [0:4) of an (8, 6) tensor sends the region [2:4, 3:6] to a
// device holding columns [3:6):
//   copy_box(src, Box{{0,0},{4,6}}, dst, Box{{0,3},{8,3}}, Box{{2,3},{2,3}}, /*elem=*/4);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {

/// The overlap of two boxes of the same rank, or std::nullopt if it is empty.
std::optional<Box> intersect(const Box& a, const Box& b);

/// True if `inner` lies inside `outer`.
bool contains(const Box& outer, const Box& inner);

/// Copies region `piece` from `src` (a row-major buffer holding `src_box`) to `dst` (holding
/// `dst_box`). `piece` must lie in both boxes. Contiguous runs are copied with memcpy.
void copy_box(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
              const Box& piece, size_t element_size);

/// Splits `box` along its outer dimensions into pieces of at most `max_elements` elements
/// (at least one element each), in row-major order. An empty box gives no piece.
std::vector<Box> split_box(const Box& box, int64_t max_elements);

}  // namespace meshlayout
