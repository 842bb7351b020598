#include "meshlayout/runtime/mpi/initialize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/operation_agreement.h"

namespace meshlayout {
namespace {

std::optional<int64_t> env_count(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return parse_device_count_variable(name, v);
}

struct LocalDevices {
  int64_t count;
  std::string source;  // where the count came from, for messages
};

LocalDevices choose_local_devices(const InitializeOptions& options, int processes) {
  if (options.local_devices) {
    if (*options.local_devices < 1 || *options.local_devices > kMaxDeviceCount / processes) {
      throw ValueError(fmt::format(
          "local_devices must be from 1 to {} ({} devices over {} "
          "processes), got {}",
          kMaxDeviceCount / processes, kMaxDeviceCount, processes, *options.local_devices));
    }
    return {*options.local_devices, "the local_devices option"};
  }
  const std::optional<int64_t> local = env_count("MESHLAYOUT_LOCAL_DEVICES");
  const std::optional<int64_t> global = env_count(kCpuDevicesEnvVar);
  if (local && global && *local * processes != *global) {
    throw ValueError(fmt::format(
        "MESHLAYOUT_LOCAL_DEVICES={} and {}={} disagree: {} devices per process x {} processes "
        "is {} devices, not {}; set only one of them",
        *local, kCpuDevicesEnvVar, *global, *local, processes, *local * processes, *global));
  }
  if (local) {
    if (*local > kMaxDeviceCount / processes) {
      throw ValueError(fmt::format(
          "MESHLAYOUT_LOCAL_DEVICES={} over {} processes makes {} devices; at most {} in all",
          *local, processes, *local * processes, kMaxDeviceCount));
    }
    return {*local, fmt::format("MESHLAYOUT_LOCAL_DEVICES={}", *local)};
  }
  if (global) {
    if (*global % processes != 0) {
      throw ValueError(fmt::format(
          "{}={} devices cannot be split evenly over {} processes; set MESHLAYOUT_LOCAL_DEVICES "
          "(devices per process) instead",
          kCpuDevicesEnvVar, *global, processes));
    }
    return {*global / processes, fmt::format("{}={}", kCpuDevicesEnvVar, *global)};
  }
  return {std::max<int64_t>(1, kDefaultCpuDeviceCount / processes), "the default"};
}

}  // namespace

size_t pool_threads_per_process(size_t available, size_t node_cpus, int local_processes) {
  const size_t share =
      std::max<size_t>(1, node_cpus / static_cast<size_t>(std::max(1, local_processes)));
  return std::max<size_t>(1, std::min(available, share));
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

std::shared_ptr<Runtime> initialize(int* argc, char*** argv, const InitializeOptions& options) {
  MpiContext mpi = initialize_mpi(
      argc, argv, {.num_processes = options.num_processes, .process_id = options.process_id});
  // Each process reads its own environment: a bad value on one process, or processes that
  // would name their devices differently, fail every process with one message.
  LocalDevices local{1, ""};
  size_t threads = 1;
  std::exception_ptr failure;
  try {
    local = choose_local_devices(options, mpi.num_processes);
    threads = thread_count_from_environment().value_or(pool_threads_per_process(
        available_cpus(), std::thread::hardware_concurrency(), mpi.local_processes));
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(*mpi.world, failure);
  try {
    agree_on_operation(*mpi.world, "the devices of each process",
                       fmt::format("local devices={}", local.count));
  } catch (const ValueError& e) {
    throw ValueError(
        fmt::format("{} (this process took {} from {})", e.what(), local.count, local.source));
  }
  set_device_count(local.count * mpi.num_processes);
  auto runtime =
      std::make_shared<Runtime>(mpi.world, local.count, std::make_shared<ThreadPool>(threads));
  set_default_runtime(runtime);
  return runtime;
}

}  // namespace meshlayout
