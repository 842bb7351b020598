// matmul_backward.h — the backward of y = x @ w (a Dense layer's kernel product) on distributed
// arrays, with the conjugate collectives of Megatron / OneFlow SBP (reference §6):
//   dx = dy · wᵀ  in x's layout. A column-parallel w (K, N split on 'model') gives dy split on
//                 N, so the contraction over N is a partial sum over 'model', reduced by matmul
//                 into x's layout (Megatron's f: identity forward, all-reduce backward).
//   dw = xᵀ · dy  in w's layout. x's leading dims are flattened to M rows; with the batch split
//                 over 'data' the contraction over M is a partial sum over 'data' reduced into
//                 w's layout: the gradient summed over the data replicas (data parallelism's
//                 all-reduce).
// Both run through matmul (matmul.h), so every rule of matmul_plan.h applies (reshards are
// chosen by bytes; a MatmulPlan* reports the plan). transpose() flips a 2-D array shard by shard
// without communication: layout (a, b) becomes (b, a).
//
// Example:
//   Array y = matmul(x, w);                                          // logits (B, T, V)
//   Array dy = sparse_categorical_crossentropy_backward(y, labels);  // cross_entropy.h
//   DenseGrads g = matmul_backward(x, w, dy);   // g.dx in x's layout, g.dw in w's
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/ops/matmul_plan.h"

namespace meshlayout {

/// m (R, C) → mᵀ (C, R), layout (a, b) → (b, a), each device transposing its own box. F32/F64.
/// Collective (allocation is agreed). ValueError for another rank or dtype.
Array transpose(const Array& m);

/// dy (…, N) · wᵀ → (…, K) in `x_layout`. Collective.
/// \error ValueError naming the shapes if dy's last dim is not w's N or dtypes differ.
Array matmul_backward_input(const Array& dy, const Array& w, const TensorLayout& x_layout,
                            MatmulPlan* plan_out = nullptr);

/// xᵀ · dy over every leading position → (K, N) in `w_layout`. Collective.
/// \error ValueError naming the shapes if x (…, K) and dy (…, N) differ in their leading dims.
Array matmul_backward_weight(const Array& x, const Array& dy, const TensorLayout& w_layout,
                             MatmulPlan* plan_out = nullptr);

struct DenseGrads {
  Array dx;  // x's shape and layout
  Array dw;  // w's shape and layout
};

/// Both gradients of y = x @ w given dy = dL/dy. Collective.
DenseGrads matmul_backward(const Array& x, const Array& w, const Array& dy);

}  // namespace meshlayout
