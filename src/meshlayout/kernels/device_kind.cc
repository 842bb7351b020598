// device_kind.cc — see device_kind.h and kernel_op.h.
#include "meshlayout/kernels/device_kind.h"

#include <fmt/format.h>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

DeviceKind device_kind_of(std::string_view device) {
  if (device.rfind("cpu:", 0) == 0) return DeviceKind::kCpu;
  if (device.rfind("cuda:", 0) == 0) return DeviceKind::kCuda;
  throw ValueError(fmt::format("device {} is of no known kind: expected a name cpu:<i> or cuda:<i>",
                               quote(std::string(device))));
}

DeviceKind kind_of(const Array& array) {
  const std::vector<std::string>& devices = array.mesh().devices();
  return devices.empty() ? DeviceKind::kCpu : device_kind_of(devices.front());
}

namespace internal_kernels {

void throw_missing_kernel(std::string_view op, DeviceKind kind) {
  throw NotFoundError(fmt::format(
      "kernel {} has no {} implementation: the compute seam (kernels/) defines it for cpu; a "
      "device kind must define every kernel its arrays reach",
      quote(std::string(op)), device_kind_name(kind)));
}

}  // namespace internal_kernels
}  // namespace meshlayout
