#include "meshlayout/layout/box_ops.h"

#include <algorithm>
#include <cstring>

#include "meshlayout/core/errors.h"

namespace meshlayout {

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box out;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.offset.push_back(lo);
    out.shape.push_back(hi - lo);
  }
  return out;
}

bool contains(const Box& outer, const Box& inner) {
  for (size_t d = 0; d < outer.shape.size(); ++d) {
    if (inner.offset[d] < outer.offset[d] ||
        inner.offset[d] + inner.shape[d] > outer.offset[d] + outer.shape[d]) {
      return false;
    }
  }
  return true;
}

void copy_box(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
              const Box& piece, size_t element_size) {
  const size_t rank = piece.shape.size();
  if (piece.num_elements() == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, element_size);
    return;
  }
  // Merge the innermost dimensions over which the piece is contiguous in both buffers.
  size_t inner = rank - 1;  // dims [inner, rank) form one contiguous run
  int64_t run = piece.shape[rank - 1];
  while (inner > 0 && piece.shape[inner] == src_box.shape[inner] &&
         piece.shape[inner] == dst_box.shape[inner]) {
    --inner;
    run *= piece.shape[inner];
  }
  // Row-major strides (elements) of both buffers.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) {
    src_stride[d - 1] = src_stride[d] * src_box.shape[d];
    dst_stride[d - 1] = dst_stride[d] * dst_box.shape[d];
  }
  int64_t src_base = 0, dst_base = 0;
  for (size_t d = 0; d < rank; ++d) {
    src_base += (piece.offset[d] - src_box.offset[d]) * src_stride[d];
    dst_base += (piece.offset[d] - dst_box.offset[d]) * dst_stride[d];
  }
  const size_t run_bytes = static_cast<size_t>(run) * element_size;
  // Odometer over the outer dims [0, inner).
  std::vector<int64_t> index(inner, 0);
  int64_t src_off = src_base, dst_off = dst_base;
  while (true) {
    std::memcpy(dst + static_cast<size_t>(dst_off) * element_size,
                src + static_cast<size_t>(src_off) * element_size, run_bytes);
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++index[d] < piece.shape[d]) {
        src_off += src_stride[d];
        dst_off += dst_stride[d];
        break;
      }
      src_off -= (piece.shape[d] - 1) * src_stride[d];
      dst_off -= (piece.shape[d] - 1) * dst_stride[d];
      index[d] = 0;
      if (d == 0) return;
    }
    if (inner == 0) return;
  }
}

std::vector<Box> split_box(const Box& box, int64_t max_elements) {
  std::vector<Box> out;
  if (box.num_elements() == 0) return out;
  max_elements = std::max<int64_t>(max_elements, 1);
  if (box.num_elements() <= max_elements || box.shape.empty()) {
    out.push_back(box);
    return out;
  }
  // Elements of one slice along dim 0.
  const int64_t slice = box.num_elements() / box.shape[0];
  if (slice <= max_elements) {
    const int64_t rows = max_elements / slice;
    for (int64_t r = 0; r < box.shape[0]; r += rows) {
      Box part = box;
      part.offset[0] = box.offset[0] + r;
      part.shape[0] = std::min(rows, box.shape[0] - r);
      out.push_back(std::move(part));
    }
    return out;
  }
  // One slice is too big: split each slice along the remaining dims.
  for (int64_t r = 0; r < box.shape[0]; ++r) {
    Box inner{{box.offset.begin() + 1, box.offset.end()}, {box.shape.begin() + 1, box.shape.end()}};
    for (Box& p : split_box(inner, max_elements)) {
      p.offset.insert(p.offset.begin(), box.offset[0] + r);
      p.shape.insert(p.shape.begin(), 1);
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace meshlayout
