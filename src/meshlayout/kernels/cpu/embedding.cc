// cpu/embedding.cc — the CPU implementation of kernels/embedding.h.
#include "meshlayout/kernels/embedding.h"

#include <algorithm>
#include <cstring>

namespace meshlayout {
namespace {

int64_t id_at(const Array::Shard& s, DType dtype, int64_t k) {
  return dtype == DType::kI32 ? reinterpret_cast<const int32_t*>(s.buffer.data())[k]
                              : reinterpret_cast<const int64_t*>(s.buffer.data())[k];
}

/// Global row-major index of local element `k` of `box` in a tensor of `shape`.
int64_t global_index(const Box& box, const Shape& shape, int64_t k) {
  const int rank = static_cast<int>(shape.size());
  Shape coords(static_cast<size_t>(rank));
  for (int d = rank - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    coords[i] = box.offset[i] + (box.shape[i] == 0 ? 0 : k % box.shape[i]);
    if (box.shape[i] != 0) k /= box.shape[i];
  }
  int64_t g = 0;
  for (int d = 0; d < rank; ++d)
    g = g * shape[static_cast<size_t>(d)] + coords[static_cast<size_t>(d)];
  return g;
}

/// One scatter-add: the dy rows (tokens × the table shard's columns) of the tokens whose ids lie
/// in the table shard's rows, added into `out` (the table shard's box, zeroed first). E: float
/// (F32) or double (F64), the table's element type.
template <typename E>
void scatter_add(DType id_dtype, const Array::Shard& tokens, const Array::Shard& dy,
                 const Box& table_box, E* out) {
  const int64_t r0 = table_box.offset[0], r1 = r0 + table_box.shape[0], cols = table_box.shape[1];
  std::fill(out, out + table_box.num_elements(), E(0));
  const E* g = reinterpret_cast<const E*>(dy.buffer.data());
  const int64_t n = tokens.box.num_elements();
  for (int64_t t = 0; cols > 0 && t < n; ++t) {
    const int64_t id = id_at(tokens, id_dtype, t);
    if (id < r0 || id >= r1) continue;
    E* row = out + (id - r0) * cols;
    const E* src = g + t * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] += src[c];
  }
}

}  // namespace

void embedding_find_bad_id_cpu(const EmbeddingFindBadId& args) {
  const Array::Shard& s = *args.tokens;
  const int64_t n = s.box.num_elements();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t id = id_at(s, args.id_dtype, k);
    if (id < 0 || id >= args.input_dim) {
      *args.bad_index = global_index(s.box, *args.shape, k);
      *args.bad_id = id;
      return;  // row-major: the first in the box is its smallest global index
    }
  }
}

void embedding_lookup_cpu(const EmbeddingLookup& args) {
  const int64_t r0 = args.table->box.offset[0], r1 = r0 + args.table->box.shape[0];
  const int64_t cols = args.table->box.shape[1];
  const int64_t n = args.tokens->box.num_elements();
  const size_t row_bytes = static_cast<size_t>(cols) * args.element_size;
  const std::byte* table = args.table->buffer.data();
  std::byte* out = args.out->buffer.data();
  for (int64_t t = 0; cols > 0 && t < n; ++t) {
    const int64_t id = id_at(*args.tokens, args.id_dtype, t);
    std::byte* dst = out + static_cast<size_t>(t) * row_bytes;
    if (id >= r0 && id < r1) {
      std::memcpy(dst, table + static_cast<size_t>(id - r0) * row_bytes, row_bytes);
    } else {
      std::memset(dst, 0, row_bytes);
    }
  }
  const size_t bytes = static_cast<size_t>(n) * row_bytes;
  for (Array::Shard* r : args.replicas) {
    if (bytes > 0) std::memcpy(r->buffer.data(), out, bytes);
  }
}

void embedding_scatter_add_cpu(const EmbeddingScatterAdd& args) {
  Array::Shard& p = *args.table_grad;
  if (args.dtype == DType::kF32) {
    scatter_add(args.id_dtype, *args.tokens, *args.dy, p.box,
                reinterpret_cast<float*>(p.buffer.data()));
  } else {
    scatter_add(args.id_dtype, *args.tokens, *args.dy, p.box,
                reinterpret_cast<double*>(p.buffer.data()));
  }
}

}  // namespace meshlayout
