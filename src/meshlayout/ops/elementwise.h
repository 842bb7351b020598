// elementwise.h — element-wise ops on distributed arrays: add, multiply (keras.ops.add /
// multiply on equal shapes) and concatenate (keras.ops.concatenate), shard by shard.
//
// Layouts: a binary op computes in the layout of its first operand; the second is resharded to
// that layout first when it differs (distribute_tensor, fewest bytes moved), so two operands in
// the same layout never communicate. concatenate needs the joined axis whole on each device:
// every input is brought to the first input's layout with that axis not sharded, each device
// joins its boxes, and the result keeps that layout (the joined axis whole). F32 and F64.
//
// Example:
//   Array y = add(x, residual);                    // y.layout() == x.layout()
//   Array g = multiply(gate, up);
//   const Array* parts[] = {&a, &b};
//   Array c = concatenate(parts, /*axis=*/-1);     // (…, na + nb)
#pragma once

#include <cstdint>
#include <span>

#include "meshlayout/array/array.h"

namespace meshlayout {

/// a + b, element by element, in a's layout. Collective.
/// \error ValueError naming both shapes/dtypes if they differ, or a dtype other than F32/F64.
Array add(const Array& a, const Array& b);

/// a * b, element by element, in a's layout. Collective. Errors as add.
Array multiply(const Array& a, const Array& b);

/// The same, computed in a's own buffers (no copy of a; b is used as it is when it has a's
/// layout). `a` must own its buffers, not borrow another array's shards (array_view.h).
Array add(Array&& a, const Array& b);
Array multiply(Array&& a, const Array& b);

/// The inputs joined along `axis` (negative counts from the end). Collective.
/// \error ValueError for no inputs, differing ranks, dtypes or extents off the axis (naming the
///   input and its shape), an axis out of range, or a dtype other than F32/F64.
Array concatenate(std::span<const Array* const> inputs, int64_t axis);

}  // namespace meshlayout
