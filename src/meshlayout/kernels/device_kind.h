// device_kind.h — DeviceKind: the kinds of device an array's shards can live on, each with its
// own implementation of every kernel (kernel_op.h). CPU is the only kind today; CUDA is next
// (issue 26). The kind of a device comes from its name, as list_devices() gives it: "cpu:3".
//
// Example:
//   DeviceKind k = kind_of(array);            // DeviceKind::kCpu for arrays on cpu:K devices
//   device_kind_name(DeviceKind::kCuda);      // "cuda"
#pragma once

#include <cstddef>
#include <string_view>

namespace meshlayout {

class Array;

enum class DeviceKind : unsigned char { kCpu = 0, kCuda = 1 };
inline constexpr size_t kDeviceKindCount = 2;

/// "cpu", "cuda".
std::string_view device_kind_name(DeviceKind kind);

/// The kind of the device named `device` ("cpu:3" → kCpu, "cuda:0" → kCuda). ValueError naming
/// the device for any other prefix.
DeviceKind device_kind_of(std::string_view device);

/// The kind of the devices an array's mesh is made of (a mesh holds devices of one kind).
DeviceKind kind_of(const Array& array);

}  // namespace meshlayout
