// register.cc — see register.h.
#include "meshlayout/kernels/cuda/register.h"

#include <mutex>

namespace meshlayout {

void register_cuda_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    internal_cuda::register_cuda_memory_kernels();
    internal_cuda::register_cuda_linear_kernels();
    internal_cuda::register_cuda_layer_kernels();
    internal_cuda::register_cuda_optimizer_kernels();
  });
}

}  // namespace meshlayout
