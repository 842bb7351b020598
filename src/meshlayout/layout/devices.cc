#include "meshlayout/layout/devices.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

std::atomic<int64_t> g_device_count_override{0};

}  // namespace

int64_t parse_device_count_variable(const char* name, const char* text) {
  const std::string what = fmt::format("environment variable {}", name);
  const std::string_view t = trim(text);
  const bool digits =
      !t.empty() && t.size() <= 18 && t.find_first_not_of("0123456789") == std::string_view::npos;
  const int64_t n = digits ? parse_int64(t, what) : 0;
  if (!digits || n < 1 || n > kMaxDeviceCount) {
    throw ValueError(fmt::format("{}={} must be a whole number of devices from 1 to {}", name,
                                 quote(text), kMaxDeviceCount));
  }
  return n;
}

int64_t get_device_count(std::string_view device_type) {
  return static_cast<int64_t>(list_devices(device_type).size());
}

int64_t device_count() {
  int64_t overridden = g_device_count_override.load(std::memory_order_relaxed);
  if (overridden > 0) return overridden;
  const char* env = std::getenv(kCpuDevicesEnvVar);
  if (env == nullptr || *env == '\0') return kDefaultCpuDeviceCount;
  return parse_device_count_variable(kCpuDevicesEnvVar, env);
}

void set_device_count(int64_t n) {
  if (n < 1 || n > kMaxDeviceCount) {
    throw ValueError(fmt::format("device count must be from 1 to {}, got {}", kMaxDeviceCount, n));
  }
  g_device_count_override.store(n, std::memory_order_relaxed);
}

void reset_device_count() { g_device_count_override.store(0, std::memory_order_relaxed); }

std::vector<std::string> list_devices(std::string_view device_type) {
  if (device_type != "cpu") {
    throw ValueError(fmt::format("unknown device type {}; meshlayout has devices of type 'cpu'",
                                 quote(device_type)));
  }
  int64_t n = device_count();
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) names.push_back(device_name(i));
  return names;
}

std::string device_name(int64_t id) { return fmt::format("cpu:{}", id); }

std::optional<int64_t> parse_device_name(std::string_view name) {
  constexpr std::string_view kPrefix = "cpu:";
  if (name.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view digits = name.substr(kPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;
  int64_t id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  return id;
}

}  // namespace meshlayout
