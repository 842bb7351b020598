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
  for_each_contiguous_run(src_box, dst_box, piece, element_size,
                          [&](size_t src_off, size_t dst_off, size_t bytes) {
                            std::memcpy(dst + dst_off, src + src_off, bytes);
                          });
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
