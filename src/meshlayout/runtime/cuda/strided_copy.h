// strided_copy.h — one kernel launch for many byte-strided copies on one GPU (the CUDA kind's
// DeviceMemory::copy_strided_batch): every copy is cut into 2-D pieces (rows of run_bytes, a pitch
// on each side), each piece into tasks of about 128 KiB, and one block copies one task with the
// widest word (16, 8, 4, 2 or 1 bytes) that the piece's addresses, pitches and run allow. A
// reshard's pieces then move at the copy rate of the GPU instead of one cudaMemcpy2DAsync each
// (measured on the H100: 16 KiB rows at 0.2–0.4× a contiguous cudaMemcpy).
//
// Example:
//   launch_strided_copies(copies, stream, /*gpu=*/0);   // enqueued; returns at once
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "meshlayout/runtime/device_memory.h"

namespace meshlayout::cuda {

/// Enqueues every copy (device to device, on one GPU; checked by the caller) on `stream`.
void launch_strided_copies(std::span<const StridedCopy> copies, cudaStream_t stream, int gpu);

}  // namespace meshlayout::cuda
