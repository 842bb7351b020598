// devices.h — the global device names meshlayout knows: `cpu:0 … cpu:N-1` and, in a build with
// CUDA (-DMESHLAYOUT_CUDA=ON), `gpu:0 … gpu:G-1`, and the device kinds (DeviceKind).
//
// N is, in order of precedence: the count given to set_device_count() (the MPI runtime
// sets it to processes × local devices), else the environment variable
// MESHLAYOUT_CPU_DEVICES, else 8. A DeviceMesh built without devices takes list_devices().
// G is MESHLAYOUT_GPU_DEVICES (virtual GPU devices over the physical GPUs, several per GPU when
// larger), else the number of physical GPUs (0 without CUDA or without a GPU: list_devices("gpu")
// is then empty, as Keras' is on a machine without one).
//
// Example:
//   list_devices();            // {"cpu:0", …, "cpu:7"}
//   set_device_count(4);       // now {"cpu:0", …, "cpu:3"}
//   parse_device_name("cpu:3") // 3
//   list_devices("gpu");       // {"gpu:0", …} with MESHLAYOUT_GPU_DEVICES=8: 8 over one H100
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {

inline constexpr int64_t kDefaultCpuDeviceCount = 8;
inline constexpr const char* kCpuDevicesEnvVar = "MESHLAYOUT_CPU_DEVICES";
inline constexpr const char* kGpuDevicesEnvVar = "MESHLAYOUT_GPU_DEVICES";

/// The kinds of device an array's shards can live on; each has its own memory
/// (runtime/device_memory.h) and its own implementation of every kernel (kernels/kernel_op.h).
enum class DeviceKind : unsigned char { kCpu = 0, kCuda = 1 };
inline constexpr size_t kDeviceKindCount = 2;

/// "cpu", "gpu" (the prefix of the kind's device names).
std::string_view device_kind_name(DeviceKind kind);

/// The kind of the device named `device` ("cpu:3" → kCpu, "gpu:0" → kCuda). ValueError naming
/// the device for any other prefix.
DeviceKind device_kind_of(std::string_view device);
/// Most devices a process may name (2^20 = 1,048,576; a mesh of that many costs ~120 MB of
/// names). MESHLAYOUT_CPU_DEVICES, MESHLAYOUT_LOCAL_DEVICES and set_device_count() are
/// refused above it, naming the variable.
inline constexpr int64_t kMaxDeviceCount = int64_t{1} << 20;

/// Parses a device-count environment variable `name` = `text`: a whole number from 1 to
/// kMaxDeviceCount, else ValueError naming the variable and its value.
int64_t parse_device_count_variable(const char* name, const char* text);

/// Global device names `cpu:K`, K = 0 … device_count()-1, or for "gpu" `gpu:K`,
/// K = 0 … gpu_device_count()-1; any other `device_type` is a ValueError naming the valid types.
std::vector<std::string> list_devices(std::string_view device_type = "cpu");

/// Virtual GPU devices: MESHLAYOUT_GPU_DEVICES, else the physical GPUs (0 without CUDA).
int64_t gpu_device_count();

/// Physical GPUs this process sees (0 in a build without CUDA or where there is none).
int64_t physical_gpu_count();

/// Number of global devices (see the file comment for where it comes from).
int64_t device_count();

/// keras.distribution.get_device_count(device_type): the number of list_devices(device_type).
/// ValueError for a device type other than "cpu", as list_devices().
int64_t get_device_count(std::string_view device_type = "cpu");

/// Overrides the device count for this process; `n` must be >= 1.
void set_device_count(int64_t n);

/// Forgets set_device_count(): back to the environment variable or the default.
void reset_device_count();

/// `cpu:K` (or `gpu:K`) for global index K.
std::string device_name(int64_t id, DeviceKind kind = DeviceKind::kCpu);

/// The global index of a device name `cpu:K` or `gpu:K` (K a decimal without sign or leading
/// zeros); std::nullopt for any other text.
std::optional<int64_t> parse_device_name(std::string_view name);

}  // namespace meshlayout
