// memory.h — the memory kernels of the compute seam: copies between shards on one device, from
// host memory into a shard, box copies, fills (a scalar, an initializer) and an in-place scale.
// They are what a device kind's memory implementation provides (cudaMemcpy2D, a fill kernel…);
// layers reach shard bytes only through them.
//
// Example:
//   copy_runs(kind, {.dst = &cache_shard, .dst_offset = start * row, .dst_stride = max * row,
//                    .src = &rows_shard, .src_stride = t * row, .runs = batch, .run_bytes = t *
//                    row});
//   fill_scalar(kind, {.shard = &s, .dtype = DType::kF32, .value = 1.0f});
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "meshlayout/array/array.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

/// `runs` runs of `run_bytes`: run r from src byte src_offset + r·src_stride to dst byte
/// dst_offset + r·dst_stride (one device; the shards may be the same only if runs do not
/// overlap). Nothing for run_bytes == 0.
struct CopyRuns {
  Array::Shard* dst;
  size_t dst_offset = 0, dst_stride = 0;
  const Array::Shard* src;
  size_t src_offset = 0, src_stride = 0;
  int64_t runs = 1;
  size_t run_bytes = 0;
};

/// `bytes` bytes from host memory into the shard at byte `dst_offset`.
struct CopyFromHost {
  Array::Shard* dst;
  size_t dst_offset = 0;
  const std::byte* host;
  size_t bytes = 0;
};

/// The elements of `region` (global coordinates, inside both boxes) from src (holding src_box)
/// to dst (holding dst_box), elements of `elem` bytes (layout/box_ops.h's copy_box).
struct CopyBoxOnDevice {
  Array::Shard* dst;
  Box dst_box;
  const Array::Shard* src;
  Box src_box;
  Box region;
  size_t elem;
};

/// Every element of the shard set to `value` (F32, or F64 from the float value).
struct FillScalar {
  Array::Shard* shard;
  DType dtype;
  float value;
};

/// Every element multiplied by `factor` (F32: computed in double, rounded to float).
struct ScaleInPlace {
  Array::Shard* shard;
  DType dtype;
  double factor;
};

/// A run of the last axis with its own initializer (a fused kernel's parts).
struct InitializerRun {
  int64_t length;
  const Initializer* initializer;
};

/// The shard's box of a tensor of `shape` drawn by `initializer` (init/initializers.h fill_box,
/// keyed by `key`), or, when `runs` is not empty, by one initializer per run of the last axis
/// (run i keyed key + i, each drawn as a tensor of its own).
struct FillInitializer {
  Array::Shard* shard;
  const Initializer* initializer;
  std::span<const InitializerRun> runs;
  const Shape* shape;
  DType dtype;
  uint64_t key;
};

void copy_runs_cpu(const CopyRuns& args);
void copy_from_host_cpu(const CopyFromHost& args);
void copy_box_on_device_cpu(const CopyBoxOnDevice& args);
void fill_scalar_cpu(const FillScalar& args);
void scale_in_place_cpu(const ScaleInPlace& args);
void fill_initializer_cpu(const FillInitializer& args);

inline KernelOp<void(const CopyRuns&)> copy_runs{"copy_runs", &copy_runs_cpu};
inline KernelOp<void(const CopyFromHost&)> copy_from_host{"copy_from_host", &copy_from_host_cpu};
inline KernelOp<void(const CopyBoxOnDevice&)> copy_box_on_device{"copy_box_on_device",
                                                                 &copy_box_on_device_cpu};
inline KernelOp<void(const FillScalar&)> fill_scalar{"fill_scalar", &fill_scalar_cpu};
inline KernelOp<void(const ScaleInPlace&)> scale_shard{"scale_shard", &scale_in_place_cpu};
inline KernelOp<void(const FillInitializer&)> fill_initializer{"fill_initializer",
                                                               &fill_initializer_cpu};

}  // namespace meshlayout
