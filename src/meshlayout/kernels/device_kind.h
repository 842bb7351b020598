// device_kind.h — DeviceKind: the kinds of device an array's shards can live on, each with its
// own implementation of every kernel (kernel_op.h). CPU and CUDA (built with
// -DMESHLAYOUT_CUDA=ON). The kind of a device comes from its name, as list_devices() gives it:
// "cpu:3".
//
// Example:
//   DeviceKind k = kind_of(array);            // DeviceKind::kCpu for arrays on cpu:K devices
//   device_kind_name(DeviceKind::kCuda);      // "gpu" (devices gpu:K; "cuda:K" is read too)
#pragma once

#include <cstddef>
#include <string_view>

#include "meshlayout/layout/devices.h"  // DeviceKind, device_kind_name, device_kind_of

namespace meshlayout {

class Array;

/// The kind of the devices an array's mesh is made of (a mesh holds devices of one kind).
DeviceKind kind_of(const Array& array);

}  // namespace meshlayout
