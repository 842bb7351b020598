// embedding.h — the per-shard kernels of keras.layers.Embedding (nn/layers/core/embedding.h): the
// id check, the row lookup (a table shard's rows for the tokens whose ids it holds, zeros for the
// others) and the backward's scatter-add of dy rows into a table block.
//
// Example (per lookup, in nn/layers/core/embedding.cc):
//   embedding_lookup(kind, {.tokens = t, .id_dtype = DType::kI32, .table = table.shard_at(pos),
//                           .out = &out_shard, .replicas = {}, .element_size = 4});
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// The first id of `tokens` (row-major) outside [0, input_dim): its global row-major index in
/// a tensor of `shape` into *bad_index and the id into *bad_id, both untouched when none is.
struct EmbeddingFindBadId {
  const Array::Shard* tokens;
  DType id_dtype;  // I32 or I64
  int64_t input_dim;
  const Shape* shape;  // the tokens' global shape
  int64_t* bad_index;
  int64_t* bad_id;
};

/// out (tokens × the table shard's columns, row-major) = the table shard's row (rows
/// [offset, offset + extent) of the table, all its columns) of each token whose id it holds,
/// zeros for the others; then copied whole to each of `replicas`.
struct EmbeddingLookup {
  const Array::Shard* tokens;
  DType id_dtype;  // I32 or I64
  const Array::Shard* table;
  Array::Shard* out;
  std::span<Array::Shard* const> replicas;
  size_t element_size;  // the table's
};

/// table_grad (its box of the table) = Σ over the tokens whose ids lie in its rows of their dy
/// rows (tokens × the box's columns), zeroed first.
struct EmbeddingScatterAdd {
  Array::Shard* table_grad;
  const Array::Shard* tokens;
  DType id_dtype;  // I32 or I64
  const Array::Shard* dy;
  DType dtype;  // the table's: F32 or F64
};

void embedding_find_bad_id_cpu(const EmbeddingFindBadId& args);
void embedding_lookup_cpu(const EmbeddingLookup& args);
void embedding_scatter_add_cpu(const EmbeddingScatterAdd& args);

inline KernelOp<void(const EmbeddingFindBadId&)> embedding_find_bad_id{"embedding_find_bad_id",
                                                                       &embedding_find_bad_id_cpu};
inline KernelOp<void(const EmbeddingLookup&)> embedding_lookup{"embedding_lookup",
                                                               &embedding_lookup_cpu};
inline KernelOp<void(const EmbeddingScatterAdd&)> embedding_scatter_add{"embedding_scatter_add",
                                                                        &embedding_scatter_add_cpu};

}  // namespace meshlayout
