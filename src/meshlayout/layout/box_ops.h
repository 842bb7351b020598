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
#include <utility>
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

/// Calls fn(src_byte_offset, dst_byte_offset, bytes) for each maximal contiguous run of region
/// `piece` between a row-major buffer holding `src_box` and one holding `dst_box` (innermost
/// dimensions over which the piece spans both boxes whole are merged into one run), in
/// row-major order. Nothing for an empty piece; one element-sized run for rank 0. copy_box
/// moves memory with it; checkpoint I/O maps a box onto the byte ranges of a file with it (the
/// file holds the whole tensor: dst_box = {zeros, shape}).
template <typename Fn>
void for_each_contiguous_run(const Box& src_box, const Box& dst_box, const Box& piece,
                             size_t element_size, Fn&& fn);

/// How many runs for_each_contiguous_run(src_box, dst_box, piece, …) calls its function with
/// (to size a list of them once: growing a list of 100,000s of runs costs more than the runs).
inline int64_t count_contiguous_runs(const Box& src_box, const Box& dst_box, const Box& piece);

/// Splits `box` along its outer dimensions into pieces of at most `max_elements` elements
/// (at least one element each), in row-major order. An empty box gives no piece.
std::vector<Box> split_box(const Box& box, int64_t max_elements);

}  // namespace meshlayout

// Implementation of for_each_contiguous_run (a template, so copy_box's memcpy loop inlines).
namespace meshlayout {
namespace box_ops_detail {
// The innermost dims [inner, rank) over which `piece` is contiguous in both boxes, and the
// elements of one run (rank >= 1).
inline std::pair<size_t, int64_t> contiguous_inner_dims(const Box& src_box, const Box& dst_box,
                                                        const Box& piece) {
  const size_t rank = piece.shape.size();
  size_t inner = rank - 1;
  int64_t run = piece.shape[rank - 1];
  while (inner > 0 && piece.shape[inner] == src_box.shape[inner] &&
         piece.shape[inner] == dst_box.shape[inner]) {
    --inner;
    run *= piece.shape[inner];
  }
  return {inner, run};
}
}  // namespace box_ops_detail

inline int64_t count_contiguous_runs(const Box& src_box, const Box& dst_box, const Box& piece) {
  const int64_t elements = piece.num_elements();
  if (elements == 0) return 0;
  if (piece.shape.empty()) return 1;
  return elements / box_ops_detail::contiguous_inner_dims(src_box, dst_box, piece).second;
}

template <typename Fn>
void for_each_contiguous_run(const Box& src_box, const Box& dst_box, const Box& piece,
                             size_t element_size, Fn&& fn) {
  const size_t rank = piece.shape.size();
  if (piece.num_elements() == 0) return;
  if (rank == 0) {
    fn(size_t{0}, size_t{0}, element_size);
    return;
  }
  // Merge the innermost dimensions over which the piece is contiguous in both buffers.
  const auto [inner, run] = box_ops_detail::contiguous_inner_dims(src_box, dst_box, piece);
  // Row-major strides (elements) of both buffers.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    src_stride[d - 1] = src_stride[d] * src_box.shape[d];
    dst_stride[d - 1] = dst_stride[d] * dst_box.shape[d];
  }
  int64_t src_off = 0, dst_off = 0;
  for (size_t d = 0; d < rank; ++d) {
    src_off += (piece.offset[d] - src_box.offset[d]) * src_stride[d];
    dst_off += (piece.offset[d] - dst_box.offset[d]) * dst_stride[d];
  }
  const size_t run_bytes = static_cast<size_t>(run) * element_size;
  // Odometer over the outer dims [0, inner).
  std::vector<int64_t> index(inner, 0);
  while (true) {
    fn(static_cast<size_t>(src_off) * element_size, static_cast<size_t>(dst_off) * element_size,
       run_bytes);
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++index[d] < piece.shape[d]) {
        src_off += src_stride[d];
        dst_off += dst_stride[d];
        break;
      }
      src_off -= (piece.shape[d] - 1) * src_stride[d];
      dst_off -= (piece.shape[d] - 1) * dst_stride[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (inner == 0) return;
  }
}
}  // namespace meshlayout
