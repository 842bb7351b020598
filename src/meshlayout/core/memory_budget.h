// memory_budget.h — checks that an allocation can be satisfied before it is made, so a tensor
// too large for the machine is a clear ResourceExhaustedError with the numbers, not a
// std::bad_alloc abort or a visit from the kernel's OOM killer.
//
// Two limits apply:
//   - the machine: MemAvailable from /proc/meminfo (what can be allocated without swapping);
//   - per device, optionally: MESHLAYOUT_DEVICE_MEMORY (e.g. "2GiB"), a budget for each
//     virtual device, as a real accelerator's memory would be.
//
// Example:
//   check_host_allocation("HostTensor (60000, 60000) F32", 14'400'000'000);
//     // ResourceExhaustedError: HostTensor (60000, 60000) F32 needs 13.4 GiB but this
//     // machine has 9.8 GiB available (MemAvailable in /proc/meminfo)
//   check_device_allocation("cpu:3", /*live=*/1 << 30, /*more=*/2ll << 30, "array (…)");
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace meshlayout {

/// The environment variable holding the per-device budget.
inline constexpr const char* kDeviceMemoryEnvVar = "MESHLAYOUT_DEVICE_MEMORY";

/// Allocations below this size skip the machine check (reading /proc/meminfo costs more
/// than such an allocation's page faults would save).
inline constexpr int64_t kHostCheckMinBytes = int64_t{64} << 20;

/// MESHLAYOUT_DEVICE_MEMORY as bytes, or nullopt when unset; ValueError when malformed.
std::optional<int64_t> device_memory_budget();

/// Bytes the machine can still give (MemAvailable; physical memory when /proc is missing).
int64_t available_host_memory();

/// ResourceExhaustedError naming `what` when `bytes` more cannot be allocated on this machine.
void check_host_allocation(std::string_view what, int64_t bytes);

/// ResourceExhaustedError naming the device and `what` when `live` + `more` bytes exceed the
/// per-device budget (no-op without one).
void check_device_allocation(std::string_view device, int64_t live, int64_t more,
                             std::string_view what);

}  // namespace meshlayout
