#include "meshlayout/layout/devices.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

#ifdef MESHLAYOUT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

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
  const std::string_view type = device_type == "cuda" ? "gpu" : device_type;
  if (type != "cpu" && type != "gpu") {
    throw ValueError(
        fmt::format("unknown device type {}; meshlayout has devices of types 'cpu' and 'gpu'",
                    quote(device_type)));
  }
  const DeviceKind kind = type == "gpu" ? DeviceKind::kCuda : DeviceKind::kCpu;
  const int64_t n = kind == DeviceKind::kCuda ? gpu_device_count() : device_count();
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) names.push_back(device_name(i, kind));
  return names;
}

int64_t physical_gpu_count() {
#ifdef MESHLAYOUT_WITH_CUDA
  static const int64_t count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: clear the error, count none
      n = 0;
    }
    return static_cast<int64_t>(n);
  }();
  return count;
#else
  return 0;
#endif
}

int64_t gpu_device_count() {
  const char* env = std::getenv(kGpuDevicesEnvVar);
  if (env != nullptr && *env != '\0') return parse_device_count_variable(kGpuDevicesEnvVar, env);
  return physical_gpu_count();
}

std::string_view device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "gpu" : "cpu";
}

DeviceKind device_kind_of(std::string_view device) {
  if (device.rfind("cpu:", 0) == 0) return DeviceKind::kCpu;
  if (device.rfind("gpu:", 0) == 0 || device.rfind("cuda:", 0) == 0) return DeviceKind::kCuda;
  throw ValueError(fmt::format("device {} is of no known kind: expected a name cpu:<i> or gpu:<i>",
                               quote(device)));
}

std::string device_name(int64_t id, DeviceKind kind) {
  return fmt::format("{}:{}", device_kind_name(kind), id);
}

std::optional<int64_t> parse_device_name(std::string_view name) {
  std::string_view digits;
  if (name.substr(0, 4) == "cpu:" || name.substr(0, 4) == "gpu:") {
    digits = name.substr(4);
  } else {
    return std::nullopt;
  }
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
