#include "meshlayout/runtime/runtime.h"

#include <fmt/format.h>

#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {

Runtime::Runtime(std::shared_ptr<Communicator> comm, int64_t local_device_count,
                 std::shared_ptr<ThreadPool> pool, DeviceKind kind)
    : comm_(std::move(comm)),
      local_count_(local_device_count),
      pool_(std::move(pool)),
      kind_(kind) {
  if (local_count_ < 1) {
    throw ValueError(
        fmt::format("a process needs at least one local device, got {}", local_device_count));
  }
  if (!pool_) pool_ = std::make_shared<ThreadPool>();
  for (int64_t i = 0; i < local_count_; ++i) {
    devices_.push_back(std::make_unique<VirtualDevice>(process_id() * local_count_ + i, kind));
  }
}

std::shared_ptr<Runtime> Runtime::single_process(int64_t count, DeviceKind kind) {
  if (count == 0) count = kind == DeviceKind::kCuda ? gpu_device_count() : device_count();
  return std::make_shared<Runtime>(
      std::shared_ptr<Communicator>(make_single_process_communicator()), count, nullptr, kind);
}

VirtualDevice& Runtime::device(int64_t id) {
  if (!is_local(id) || id < 0) {
    throw NotFoundError(fmt::format(
        "{} is not a device of process {} (it owns {}:{} … {}:{}; {} belongs to process {})",
        device_name(id, kind_), process_id(), device_kind_name(kind_), process_id() * local_count_,
        device_kind_name(kind_), process_id() * local_count_ + local_count_ - 1,
        device_name(id, kind_), process_of(id)));
  }
  return *devices_[static_cast<size_t>(id - process_id() * local_count_)];
}

std::vector<VirtualDevice*> Runtime::local_devices() {
  std::vector<VirtualDevice*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

namespace {
std::mutex g_default_mu;
std::shared_ptr<Runtime> g_default;
}  // namespace

std::shared_ptr<Runtime> default_runtime() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (!g_default || g_default->global_device_count() != device_count()) {
    // Created on first use, and again if the device count changed in a single process.
    if (!g_default || g_default->num_processes() == 1) g_default = Runtime::single_process();
  }
  return g_default;
}

std::shared_ptr<Runtime> default_runtime(DeviceKind kind) {
  if (kind == DeviceKind::kCpu) return default_runtime();
  static std::mutex gpu_mu;
  static std::shared_ptr<Runtime> gpu;
  if (default_runtime()->num_processes() > 1) {
    throw FailedPreconditionError(fmt::format(
        "GPU devices under mpirun are not supported yet: process {} of {} asked for gpu devices; "
        "run one process with MESHLAYOUT_GPU_DEVICES=N virtual GPU devices",
        process_id(), num_processes()));
  }
  const int64_t count = gpu_device_count();
  if (count == 0) {
    throw FailedPreconditionError(fmt::format(
        "no GPU devices: list_devices(\"gpu\") is empty ({}); set {} for virtual ones",
        physical_gpu_count() == 0 ? "no CUDA GPU, or a build without -DMESHLAYOUT_CUDA=ON"
                                  : "none configured",
        kGpuDevicesEnvVar));
  }
  std::lock_guard<std::mutex> lock(gpu_mu);
  if (!gpu || gpu->global_device_count() != count) {
    gpu = Runtime::single_process(count, DeviceKind::kCuda);
  }
  return gpu;
}

void set_default_runtime(std::shared_ptr<Runtime> runtime) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = std::move(runtime);
}

int process_id() { return default_runtime()->process_id(); }
int num_processes() { return default_runtime()->num_processes(); }

}  // namespace meshlayout
