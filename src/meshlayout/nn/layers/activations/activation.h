// activation.h — Keras' activations on distributed arrays (keras.activations: linear, relu,
// gelu, tanh, softmax, silu), forward and backward, shard by shard: what Dense, Conv2D and
// SeparableConv2D apply after their products.
//
// Example:
//   Activation a = parse_activation("relu");          // ValueError for an unknown name
//   Array y = apply_activation(a, z);                  // z F32 or F64, y in z's layout
//   Array dz = apply_activation_backward(a, z, dy);    // dL/dz from dy = dL/dy
#pragma once

#include <string_view>

#include "meshlayout/array/array.h"

namespace meshlayout {

/// Activations, applied shard by shard (softmax first gathers its last dimension), in x's dtype
/// (F32 or F64; any dtype for linear).
enum class Activation { kLinear, kRelu, kGelu, kTanh, kSoftmax, kSilu };
Activation parse_activation(std::string_view name);
/// A new array; x is unchanged.
Array apply_activation(Activation activation, const Array& x);
/// The same, computed in x's own buffers when the layout stays (every activation but a
/// softmax over a split last dimension): no copy.
Array apply_activation(Activation activation, Array&& x);
/// The backward of y = apply_activation(activation, z): dL/dz from dy = dL/dy, in z's layout
/// (dy is brought to it). relu: dy·[z > 0]; gelu (exact, erf): dy·(Φ(z) + z·φ(z)); tanh:
/// dy·(1 - tanh²z); silu: dy·σ(z)·(1 + z·(1 - σ(z))); softmax over the last dim (gathered if
/// split, as the forward): y·(dy - Σ dy·y), the row sums in double; linear: dy. Collective.
/// \error ValueError naming both if z and dy differ in shape or dtype or are not F32 or F64.
Array apply_activation_backward(Activation activation, const Array& z, const Array& dy);

}  // namespace meshlayout
