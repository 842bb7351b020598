#include "meshlayout/runtime/mpi/initialize.h"

#include <fmt/format.h>

#include <cstdlib>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

std::optional<int64_t> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  int64_t n = parse_int64(v, fmt::format("environment variable {}", name));
  if (n < 1) throw ValueError(fmt::format("environment variable {} must be at least 1, got {}", name, quote(v)));
  return n;
}

int64_t choose_local_devices(const InitializeOptions& options, int processes) {
  if (options.local_devices) {
    if (*options.local_devices < 1) {
      throw ValueError(fmt::format("local_devices must be at least 1, got {}", *options.local_devices));
    }
    return *options.local_devices;
  }
  if (auto local = env_int("MESHLAYOUT_LOCAL_DEVICES")) return *local;
  if (auto global = env_int(kCpuDevicesEnvVar)) {
    if (*global % processes != 0) {
      throw ValueError(fmt::format(
          "{}={} devices cannot be split evenly over {} processes; set MESHLAYOUT_LOCAL_DEVICES "
          "(devices per process) instead",
          kCpuDevicesEnvVar, *global, processes));
    }
    return *global / processes;
  }
  return std::max<int64_t>(1, kDefaultCpuDeviceCount / processes);
}

}  // namespace

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

std::shared_ptr<Runtime> initialize(int* argc, char*** argv, const InitializeOptions& options) {
  MpiContext mpi = initialize_mpi(argc, argv, {.num_processes = options.num_processes,
                                               .process_id = options.process_id});
  // Environment and options are the same on every rank, so every rank reaches the same verdict.
  const int64_t local = choose_local_devices(options, mpi.num_processes);
  set_device_count(local * mpi.num_processes);
  auto runtime = std::make_shared<Runtime>(mpi.world, local);
  set_default_runtime(runtime);
  return runtime;
}

}  // namespace meshlayout
