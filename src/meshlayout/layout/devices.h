// devices.h — the global device names meshlayout knows: `cpu:0 … cpu:N-1`.
//
// N is, in order of precedence: the count given to set_device_count() (the MPI runtime
// sets it to processes × local devices), else the environment variable
// MESHLAYOUT_CPU_DEVICES, else 8. A DeviceMesh built without devices takes list_devices().
//
// Example:
//   list_devices();            // {"cpu:0", …, "cpu:7"}
//   set_device_count(4);       // now {"cpu:0", …, "cpu:3"}
//   parse_device_name("cpu:3") // 3
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {

inline constexpr int64_t kDefaultCpuDeviceCount = 8;
inline constexpr const char* kCpuDevicesEnvVar = "MESHLAYOUT_CPU_DEVICES";
/// Most devices a process may name (2^20 = 1,048,576; a mesh of that many costs ~120 MB of
/// names). MESHLAYOUT_CPU_DEVICES, MESHLAYOUT_LOCAL_DEVICES and set_device_count() are
/// refused above it, naming the variable.
inline constexpr int64_t kMaxDeviceCount = int64_t{1} << 20;

/// Parses a device-count environment variable `name` = `text`: a whole number from 1 to
/// kMaxDeviceCount, else ValueError naming the variable and its value.
int64_t parse_device_count_variable(const char* name, const char* text);

/// Global device names `cpu:K`, K = 0 … device_count()-1. Only "cpu" exists today;
/// any other `device_type` is a ValueError naming the valid types.
std::vector<std::string> list_devices(std::string_view device_type = "cpu");

/// Number of global devices (see the file comment for where it comes from).
int64_t device_count();

/// keras.distribution.get_device_count(device_type): the number of list_devices(device_type).
/// ValueError for a device type other than "cpu", as list_devices().
int64_t get_device_count(std::string_view device_type = "cpu");

/// Overrides the device count for this process; `n` must be >= 1.
void set_device_count(int64_t n);

/// Forgets set_device_count(): back to the environment variable or the default.
void reset_device_count();

/// `cpu:K` for global index K.
std::string device_name(int64_t id);

/// The global index of a device name `cpu:K` (K a decimal without sign or leading zeros);
/// std::nullopt for any other text.
std::optional<int64_t> parse_device_name(std::string_view name);

}  // namespace meshlayout
