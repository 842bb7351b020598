// orthogonal.h — the fill behind Initializer::orthogonal() (internal to init/): the whole
// (rows, n) matrix gain * Q is computed in float64 from the counter-based normal stream of the
// variable (so every device of every process computes the same one), kept in a one-entry
// per-process cache, and the requested box is copied out in the target dtype.
//
// Example (what fill_box does for kOrthogonal):
//   internal_init::fill_orthogonal_box(Initializer::orthogonal(), {8, 32}, Box{{0, 8}, {8, 8}},
//                                      DType::kF32, out,
//                                      variable_key("lstm/lstm_cell/recurrent_kernel"));
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "meshlayout/init/initializers.h"

namespace meshlayout::internal_init {

/// gain * the orthogonal matrix for `shape` (rank >= 2), row-major (rows, shape.back()).
/// ValueError for rank < 2.
std::vector<double> orthogonal_matrix(const Initializer& init, const Shape& shape,
                                      uint64_t variable_key);

/// Writes `box` of the orthogonal tensor of `shape` to `out` in `dtype` (a floating dtype).
void fill_orthogonal_box(const Initializer& init, const Shape& shape, const Box& box, DType dtype,
                         std::byte* out, uint64_t variable_key);

}  // namespace meshlayout::internal_init
