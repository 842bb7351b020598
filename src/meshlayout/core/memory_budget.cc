#include "meshlayout/core/memory_budget.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

std::optional<int64_t> device_memory_budget() {
  const char* text = std::getenv(kDeviceMemoryEnvVar);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const uint64_t bytes =
      parse_byte_count(text, fmt::format("environment variable {}", kDeviceMemoryEnvVar));
  if (bytes == 0) {
    throw ValueError(fmt::format("environment variable {}={} must be at least 1 byte",
                                 kDeviceMemoryEnvVar, quote(text)));
  }
  return static_cast<int64_t>(bytes);
}

int64_t available_host_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : INT64_MAX;
}

void check_host_allocation(std::string_view what, int64_t bytes) {
  if (bytes < kHostCheckMinBytes) return;
  const int64_t available = available_host_memory();
  if (bytes > available) {
    throw ResourceExhaustedError(
        fmt::format("{} needs {} ({} bytes) but this machine has {} available (MemAvailable in "
                    "/proc/meminfo); use a smaller shape or more processes",
                    what, format_bytes(static_cast<uint64_t>(bytes)), bytes,
                    format_bytes(static_cast<uint64_t>(available))));
  }
}

void check_device_allocation(std::string_view device, int64_t live, int64_t more,
                             std::string_view what) {
  const std::optional<int64_t> budget = device_memory_budget();
  if (!budget || more <= *budget - live) return;
  throw ResourceExhaustedError(fmt::format(
      "{} needs {} more on device {}, which holds {} already: over its budget of {} ({}={})", what,
      format_bytes(static_cast<uint64_t>(more)), device, format_bytes(static_cast<uint64_t>(live)),
      format_bytes(static_cast<uint64_t>(*budget)), kDeviceMemoryEnvVar, *budget));
}

}  // namespace meshlayout
