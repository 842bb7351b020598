// permute.h — permute_dims: a distributed array's dimensions reordered (numpy's transpose with
// axes), output dimension i being input dimension perm[i]; its layout's dimension shardings move
// with the dimensions, so every device permutes its own box and nothing is communicated.
//
// Example:
//   Array k = ...;                                   // (heads, d, head_dim), (model, batch, None)
//   Array kd = permute_dims(k, {1, 0, 2});           // (d, heads, head_dim), (batch, model, None)
#pragma once

#include <vector>

#include "meshlayout/array/array.h"

namespace meshlayout {

/// x with its dimensions permuted by `perm` (a permutation of 0 … rank − 1), any dtype.
/// Collective (the allocation is agreed). ValueError naming perm and the shape when perm is
/// not a permutation of x's dimensions.
Array permute_dims(const Array& x, const std::vector<int>& perm);

/// The inverse permutation: permute_dims(permute_dims(x, p), inverse_permutation(p)) == x.
std::vector<int> inverse_permutation(const std::vector<int>& perm);

}  // namespace meshlayout
