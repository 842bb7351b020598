// cuda_memory.h — the CUDA kind's DeviceMemory (device_memory.h): blocks of a physical GPU's memory
// from its stream-ordered pool (cudaMallocAsync / cudaFreeAsync on the device's stream, so a block
// freed while kernels still read it is reused only after them), and copies enqueued on that stream
// (cudaMemcpyAsync; byte-strided boxes as cudaMemcpy2DAsync per outer index). Copies towards the
// host wait for the stream before returning; copies from pageable host memory return once the
// driver has staged the bytes. Out of memory is a ResourceExhaustedError naming the bytes asked
// and the bytes free of the total (MemoryAccount adds the virtual device's name).
//
// Example:
//   DeviceMemory& m = cuda_device_memory(5);     // gpu:5's physical GPU (5 mod GPU count)
//   std::byte* b = m.allocate(1 << 20);
//   m.copy_from_host(b, host, 1 << 20);
//   m.copy_to_host(host, b, 1 << 20);            // returns when the bytes are on the host
//   m.free(b, 1 << 20);
#pragma once

#include <cstdint>

#include "meshlayout/runtime/device_memory.h"

namespace meshlayout {

/// The memory of virtual device gpu:K's physical GPU (one object per physical GPU).
/// FailedPreconditionError when the process has no GPU.
DeviceMemory& cuda_device_memory(int64_t device_id);

}  // namespace meshlayout
