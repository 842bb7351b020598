// cpu/memory.cc — the CPU implementation of kernels/memory.h.
#include "meshlayout/kernels/memory.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "meshlayout/layout/box_ops.h"

namespace meshlayout {

void copy_runs_cpu(const CopyRuns& a) {
  if (a.run_bytes == 0) return;
  std::byte* dst = a.dst->buffer.data() + a.dst_offset;
  const std::byte* src = a.src->buffer.data() + a.src_offset;
  for (int64_t r = 0; r < a.runs; ++r) {
    std::memcpy(dst + static_cast<size_t>(r) * a.dst_stride,
                src + static_cast<size_t>(r) * a.src_stride, a.run_bytes);
  }
}

void copy_from_host_cpu(const CopyFromHost& a) {
  if (a.bytes > 0) std::memcpy(a.dst->buffer.data() + a.dst_offset, a.host, a.bytes);
}

void copy_box_on_device_cpu(const CopyBoxOnDevice& a) {
  if (a.region.num_elements() > 0) {
    copy_box(a.src->buffer.data(), a.src_box, a.dst->buffer.data(), a.dst_box, a.region, a.elem);
  }
}

void fill_scalar_cpu(const FillScalar& a) {
  Array::Shard& s = *a.shard;
  if (a.dtype == DType::kF64) {
    std::fill_n(reinterpret_cast<double*>(s.buffer.data()), s.box.num_elements(),
                static_cast<double>(a.value));
  } else {
    std::fill_n(reinterpret_cast<float*>(s.buffer.data()), s.box.num_elements(), a.value);
  }
}

void scale_in_place_cpu(const ScaleInPlace& a) {
  Array::Shard& s = *a.shard;
  const int64_t n = s.box.num_elements();
  if (a.dtype == DType::kF32) {
    float* p = reinterpret_cast<float*>(s.buffer.data());
    for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>(p[k] * a.factor);
  } else {
    double* p = reinterpret_cast<double*>(s.buffer.data());
    for (int64_t k = 0; k < n; ++k) p[k] *= a.factor;
  }
}

namespace {

// Fills `box` of a tensor of `shape` whose last axis is cut into `runs`, each filled as a
// tensor of its own (shape with that run as the last extent).
void fill_runs_box(std::span<const InitializerRun> runs, const Shape& shape, const Box& box,
                   DType dtype, std::byte* out, uint64_t key) {
  const size_t last = shape.size() - 1, elem = dtype_size(dtype);
  const int64_t width = box.shape[last], rows = width == 0 ? 0 : box.num_elements() / width;
  int64_t start = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const int64_t lo = std::max(start, box.offset[last]);
    const int64_t hi = std::min(start + runs[i].length, box.offset[last] + width);
    if (lo < hi && rows > 0) {
      Shape seg_shape = shape;
      seg_shape[last] = runs[i].length;
      Box sub = box;
      sub.offset[last] = lo - start;
      sub.shape[last] = hi - lo;
      std::vector<std::byte> part(static_cast<size_t>(sub.num_elements()) * elem);
      fill_box(*runs[i].initializer, seg_shape, sub, dtype, part.data(), key + i);
      const size_t run = static_cast<size_t>(hi - lo) * elem;
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + (static_cast<size_t>(r * width + (lo - box.offset[last]))) * elem,
                    part.data() + static_cast<size_t>(r) * run, run);
      }
    }
    start += runs[i].length;
  }
}

}  // namespace

void fill_initializer_cpu(const FillInitializer& a) {
  Array::Shard& s = *a.shard;
  if (a.runs.empty()) {
    fill_box(*a.initializer, *a.shape, s.box, a.dtype, s.buffer.data(), a.key);
  } else {
    fill_runs_box(a.runs, *a.shape, s.box, a.dtype, s.buffer.data(), a.key);
  }
}

}  // namespace meshlayout
