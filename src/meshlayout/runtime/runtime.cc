#include "meshlayout/runtime/runtime.h"

#include <fmt/format.h>

#include <mutex>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {

Runtime::Runtime(std::shared_ptr<Communicator> comm, int64_t local_device_count,
                 std::shared_ptr<ThreadPool> pool)
    : comm_(std::move(comm)), local_count_(local_device_count), pool_(std::move(pool)) {
  if (local_count_ < 1) {
    throw ValueError(
        fmt::format("a process needs at least one local device, got {}", local_device_count));
  }
  if (!pool_) pool_ = std::make_shared<ThreadPool>();
  for (int64_t i = 0; i < local_count_; ++i) {
    devices_.push_back(std::make_unique<VirtualDevice>(process_id() * local_count_ + i));
  }
}

std::shared_ptr<Runtime> Runtime::single_process(int64_t count) {
  if (count == 0) count = device_count();
  return std::make_shared<Runtime>(
      std::shared_ptr<Communicator>(make_single_process_communicator()), count);
}

VirtualDevice& Runtime::device(int64_t id) {
  if (!is_local(id) || id < 0) {
    throw NotFoundError(fmt::format(
        "{} is not a device of process {} (it owns cpu:{} … cpu:{}; {} belongs to process {})",
        device_name(id), process_id(), process_id() * local_count_,
        process_id() * local_count_ + local_count_ - 1, device_name(id), process_of(id)));
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

void set_default_runtime(std::shared_ptr<Runtime> runtime) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = std::move(runtime);
}

int process_id() { return default_runtime()->process_id(); }
int num_processes() { return default_runtime()->num_processes(); }

}  // namespace meshlayout
