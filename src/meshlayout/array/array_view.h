// array_view.h — reshapes of distributed arrays that move no data. A row-major reshape that
// merges or splits dimensions keeps every device's bytes where they are when each group of
// merged dimensions is split only on its first (non-unit) dimension and the block boundaries
// coincide: a kernel (d, heads, head_dim) sharded on heads is, byte for byte on every device,
// the matrix (d, heads·head_dim) sharded on its second dimension — if the heads split evenly
// (3 heads over 4 devices cut as [0:1] [1:2] [2:3] [3:3], while 3·64 columns over 4 cut as
// [0:48] …, so that one is not a view). EinsumDense and attention use these to run N-D weights
// through the 2-D matmul without copies.
//
// Example:
//   Shape flat = {d, heads * head_dim};
//   if (auto l = local_reshape_layout(kernel.layout(), kernel.shape(), flat)) {
//     Array w = view_shards(kernel, flat, *l);          // borrows kernel's buffers
//     Array y = matmul(x, w);                           // (b, t, heads·head_dim)
//     Array y4 = reshape_shards(std::move(y), {b, t, heads, head_dim},
//                               *local_reshape_layout(y.layout(), y.shape(), {b, t, heads,
//                               head_dim}));
//   }
#pragma once

#include <optional>

#include "meshlayout/array/array.h"

namespace meshlayout {

/// The layout under which an array of `shape` laid out by `layout` keeps every device's bytes
/// when reshaped (row-major) to `new_shape`: each run of dimensions merged or split takes the
/// axes of its first non-unit dimension. std::nullopt if there is none: the element counts
/// differ, a dimension other than the first non-unit one of its group is split, or the blocks
/// of some device do not coincide (uneven splits).
std::optional<TensorLayout> local_reshape_layout(const TensorLayout& layout, const Shape& shape,
                                                 const Shape& new_shape);

/// A view of `array` as `new_shape` under `layout` (from local_reshape_layout) that borrows
/// array's shard buffers: no copy, no memory charged. It must not outlive `array`; writing
/// through it writes `array`. ValueError naming both shapes and layouts if `layout` is not
/// a data-preserving reshape of array's.
Array view_shards(const Array& array, const Shape& new_shape, const TensorLayout& layout);

/// `array` reshaped to `new_shape` under `layout`, taking its shard buffers (no copy).
/// Errors as view_shards.
Array reshape_shards(Array&& array, const Shape& new_shape, const TensorLayout& layout);

/// A layout of `shape` that a reshape to `new_shape` can view: `layout` with every split
/// dimension that would stop local_reshape_layout dropped (made whole). Resharding to it first
/// makes the view possible (the fallback for uneven splits).
TensorLayout viewable_layout(const TensorLayout& layout, const Shape& shape,
                             const Shape& new_shape);

}  // namespace meshlayout
