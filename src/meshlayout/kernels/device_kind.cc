// device_kind.cc — see device_kind.h and kernel_op.h.
#include "meshlayout/kernels/device_kind.h"

#include <fmt/format.h>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/kernel_op.h"
#ifdef MESHLAYOUT_WITH_CUDA
#include "meshlayout/kernels/cuda/register.h"
#endif

namespace meshlayout {

DeviceKind kind_of(const Array& array) {
  const std::vector<std::string>& devices = array.mesh().devices();
  return devices.empty() ? DeviceKind::kCpu : device_kind_of(devices.front());
}

namespace internal_kernels {

void load_device_kind(DeviceKind kind) {
#ifdef MESHLAYOUT_WITH_CUDA
  if (kind == DeviceKind::kCuda) register_cuda_kernels();
#else
  (void)kind;
#endif
}

void throw_missing_kernel(std::string_view op, DeviceKind kind) {
  throw NotFoundError(fmt::format(
      "kernel {} has no {} implementation: the compute seam (kernels/) defines it for cpu; a "
      "device kind must define every kernel its arrays reach",
      quote(std::string(op)), device_kind_name(kind)));
}

}  // namespace internal_kernels
}  // namespace meshlayout
