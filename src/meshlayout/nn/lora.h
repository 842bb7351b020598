// lora.h — LoRA as Keras' enable_lora (Dense, Conv2D, EinsumDense): two weights beside a
// layer's kernel K, `lora_kernel_a` of shape K.shape[:-1] + (rank,) (Dense: (input_dim, rank);
// Conv2D: (kh, kw, in_channels, rank)) initialised he_uniform and `lora_kernel_b` (rank,
// K.shape[-1]) initialised zeros, each with the kernel's regulariser; K is frozen
// (trainable = false) and the layer computes with the effective kernel
//   K + (lora_alpha / rank) · A @ B,   lora_alpha defaulting to rank.
// Layouts, as Keras creates the variables: while K is lazy (enable_lora inside a model being
// built) A and B are lazy too and the model lays them out by their paths like any weight;
// otherwise laid out at once by the current distribution's (ModelParallel) or LayoutMap scope's
// rule for their paths ("dense/lora_kernel_a"), else replicated, on the kernel's mesh.
// Dtype: the layer's (Keras makes them float32 always; here they follow the layer's dtype, as
// the product needs one dtype).
// Backward: with dK = dL/d effective kernel, dA = s · dK·Bᵀ in A's layout and dB = s · Aᵀ·dK in
// B's (s = alpha / rank); the frozen K gets nothing.
//
// Example:
//   dense->enable_lora(4);                 // dense/lora_kernel_a (in, 4), dense/lora_kernel_b (4,
//   units) Array k = lora_effective_kernel(dense->kernel()->value(), dense->lora());
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/nn/gradients.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

/// A layer's LoRA weights; empty (a == nullptr) until enable_lora.
struct LoraWeights {
  VariablePtr a, b;  // lora_kernel_a, lora_kernel_b
  int64_t rank = 0;
  double alpha = 0;
  double scale() const { return rank > 0 ? alpha / static_cast<double>(rank) : 0.0; }
  bool enabled() const { return a != nullptr; }
};

/// kernel + scale · A @ B, a new array in the kernel's layout. Collective.
Array lora_effective_kernel(const Array& kernel, const LoraWeights& lora);

/// From dk = dL/d effective kernel (the kernel's shape): accumulates dA = s · dk·Bᵀ into A's
/// gradient (A's layout) and dB = s · Aᵀ·dk into B's, each only if trainable. Collective.
void accumulate_lora_gradients(const Array& dk, const LoraWeights& lora, Gradients& grads);

/// Multiplies every local element of an F32 or F64 array by `factor`, in place.
void scale_in_place(Array& a, double factor);

}  // namespace meshlayout
