// matmul.h — the first compute op: y = x @ w on distributed arrays, each device multiplying its
// own shards with one BLAS call (cblas_sgemm / cblas_dgemm), Megatron / GSPMD style.
//
// x has shape (..., K) (rank >= 2; the leading dims are batch dims, flattened for the product)
// and w shape (K, N), both F32 or both F64, on the same mesh and runtime. The result has shape
// (..., N). Its layout follows from the operands' layouts by the table in matmul_plan.h:
//   batch-sharded x  @ replicated w     -> batch-sharded y, no communication
//   x                @ column-sharded w -> y sharded on N, no communication
//   x sharded on K   @ w sharded on K   -> partial sums, completed by an all-reduce (y
//                                          replicated over those axes) or, with
//                                          MatmulOptions::output_layout, a reduce-scatter
//   any other pair   -> operands resharded first (distribute_tensor, fewest bytes), see
//                       MatmulPlan (plan_out / plan_matmul)
// Uneven (ceil) blocks and empty blocks work everywhere. Results match a float64 reference to
// float32 rounding; the sums of partial products are added in a fixed order (see NOTE
// [Partial sums] in partial_sum.h), so replicas of a block agree bit for bit.
//
// Devices run in parallel on the runtime's thread pool; OpenBLAS is set to one thread per call
// (NOTE [BLAS threads] in kernels/cpu/blas.h). In one process, a block that several devices hold
// (replicas) is computed once and copied to the others; a large block is cut into row chunks so
// every pool thread works.
//
// Example:
//   DeviceMesh mesh({2, 4}, {"data", "model"});
//   Array x = distribute_tensor(HostTensor::random(DType::kF32, {8, 6}, 1),
//                               TensorLayout({"data", "model"}, mesh));
//   Array w = distribute_tensor(HostTensor::random(DType::kF32, {6, 4}, 2),
//                               TensorLayout({"model", None}, mesh));
//   Array y = matmul(x, w);                     // layout[data,None]: all-reduce over 'model'
//   Array z = matmul(x, w, {.output_layout = TensorLayout({{"data", "model"}, None})});
//                                               // reduce-scatter over 'model'
//   y.layout() == matmul_output_layout(x.layout(), w.layout());
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/ops/matmul_plan.h"

namespace meshlayout {

/// x (..., K) @ w (K, N) → (..., N), distributed (see the file comment and matmul_plan.h).
/// Collective over the runtime's processes: every process calls it with the same operands'
/// metadata. Every check is made on replicated metadata before any communication, so all
/// processes throw the same error.
/// \error ValueError if x's rank < 2 or w's rank != 2, the contracted dimensions differ, the
///   dtypes differ or are not F32/F64, the operands are on different meshes or runtimes, or
///   output_layout does not fit the output (rank, mesh).
Array matmul(const Array& x, const Array& w, const MatmulOptions& options = {});

}  // namespace meshlayout
