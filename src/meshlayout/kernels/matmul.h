// matmul.h — the per-shard kernels of ops/matmul.h and ops/matmul_backward.h: a row chunk of one
// device's local product (x shard · w shard, copied into the replicas holding the same block),
// the fused residual (dst += src), the 2-D transpose of a box, and one piece of the partial-sum
// reduction of a K-split product (ops/partial_sum.h, NOTE [Partial sums]). F32 or F64 (float
// and double); the CPU products run the BLAS (cpu/blas.h, one thread per call).
//
// Example (ops/matmul.cc, per row chunk of a device's product, on the pool):
//   matmul_rows(kind, {.x = x_shard, .w = w_shard, .out = &out_shard, .replicas = replicas,
//                      .k = K, .n = N, .row = 64, .rows = 64, .dtype = DType::kF32});
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// Rows [row, row + rows) of out (M × N row-major, the product block) = x (M × K, the rows of
/// x's box) · w (K × N), then copied into every shard of `replicas` (the same block on other
/// local devices) while they are hot. k = 0 writes zeros.
struct MatmulRows {
  const Array::Shard* x;
  const Array::Shard* w;
  Array::Shard* out;
  std::span<Array::Shard* const> replicas;
  int64_t k, n;
  int64_t row, rows;
  DType dtype;  // F32 or F64
};

/// dst += src over the first n elements (the fused residual of MatmulOptions::add_to_output).
struct AddInto {
  Array::Shard* dst;
  const Array::Shard* src;
  int64_t n;
  DType dtype;
};

/// dst (cols × rows) = srcᵀ, src's box (rows × cols), cache-blocked.
struct TransposeBox {
  Array::Shard* dst;
  const Array::Shard* src;
  DType dtype;
};

/// One piece of a partial-sum reduction: `region` (global coordinates, inside dst's box and
/// every source's box) of dst = Σ over terms in order of (the in-order sum of the term's
/// sources), copied into every shard of `also` (replicas of dst's box). No terms: zeros. With
/// `stream`, stores are non-temporal (large outputs). Sources and dst may be on several devices
/// of one process, or staging (received pieces).
struct SumPiece {
  Array::Shard* dst;
  Box region;
  std::span<const std::vector<const Array::Shard*>> terms;
  std::span<Array::Shard* const> also;
  bool stream;
  DType dtype;
};

void matmul_rows_cpu(const MatmulRows& args);
void add_into_cpu(const AddInto& args);
void transpose_box_cpu(const TransposeBox& args);
void sum_piece_cpu(const SumPiece& args);

inline KernelOp<void(const MatmulRows&)> matmul_rows{"matmul_rows", &matmul_rows_cpu};
inline KernelOp<void(const AddInto&)> add_into{"add_into", &add_into_cpu};
inline KernelOp<void(const TransposeBox&)> transpose_box{"transpose_box", &transpose_box_cpu};
inline KernelOp<void(const SumPiece&)> sum_piece{"sum_piece", &sum_piece_cpu};

}  // namespace meshlayout
