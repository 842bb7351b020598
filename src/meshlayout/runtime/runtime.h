// runtime.h — the devices, process group and worker pool a program runs on.
//
// A Runtime is one process's view of the devices of one kind: the global device count
// (list_devices(), or list_devices("gpu") for a runtime of GPU devices), which global
// devices are local (process p owns cpu:p*L … cpu:p*L+L-1 for L local devices), a
// VirtualDevice per local device, a Communicator over the processes, a thread pool and a
// staging memory account. In one process all devices are local and the communicator has one
// rank; under mpirun (runtime/mpi/) each process holds only its local devices. Tests build
// several Runtimes over make_in_process_group() to run the multi-process code in threads.
//
// Example:
//   auto rt = default_runtime();            // 1 process, list_devices() devices
//   rt->device(3).memory().stats();         // cpu:3's bytes live and peak
//   default_runtime(DeviceKind::kCuda);     // the gpu:K devices (Array::allocate picks it for a
//                                           // mesh of GPU devices)
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/device.h"
#include "meshlayout/runtime/thread_pool.h"

namespace meshlayout {

class Runtime {
 public:
  /// One process of a group of comm->size() processes, each owning `local_device_count`
  /// devices. The pool is shared between runtimes when given (threads-as-processes tests).
  Runtime(std::shared_ptr<Communicator> comm, int64_t local_device_count,
          std::shared_ptr<ThreadPool> pool = nullptr, DeviceKind kind = DeviceKind::kCpu);

  /// A single-process runtime with `device_count` devices (default: list_devices(), or
  /// list_devices("gpu") for kCuda).
  static std::shared_ptr<Runtime> single_process(int64_t device_count = 0,
                                                 DeviceKind kind = DeviceKind::kCpu);

  DeviceKind device_kind() const { return kind_; }

  int process_id() const { return comm_->rank(); }
  int num_processes() const { return comm_->size(); }
  int64_t local_device_count() const { return local_count_; }
  int64_t global_device_count() const { return local_count_ * num_processes(); }

  /// The process that owns global device `id`.
  int process_of(int64_t id) const { return static_cast<int>(id / local_count_); }
  bool is_local(int64_t id) const { return process_of(id) == process_id(); }
  /// A local device by global id; NotFoundError naming the owning process otherwise.
  VirtualDevice& device(int64_t id);
  std::vector<VirtualDevice*> local_devices();

  Communicator& comm() { return *comm_; }
  ThreadPool& pool() { return *pool_; }
  /// Where reshard and gather stage bytes bound for or coming from other processes.
  MemoryAccount& staging() { return staging_; }

 private:
  std::shared_ptr<Communicator> comm_;
  int64_t local_count_;
  std::shared_ptr<ThreadPool> pool_;
  DeviceKind kind_;
  std::vector<std::unique_ptr<VirtualDevice>> devices_;
  MemoryAccount staging_{"staging"};
};

/// The runtime used when none is given: created on first use as single_process(), replaced
/// by the MPI runtime's initialize().
std::shared_ptr<Runtime> default_runtime();
void set_default_runtime(std::shared_ptr<Runtime> runtime);

/// The runtime of devices of `kind` used when none is given: default_runtime() for kCpu; for
/// kCuda one process's gpu:0 … gpu:G-1 (created on first use, again if G changes).
/// FailedPreconditionError when G is 0 or several processes run (GPU devices under mpirun are
/// not supported yet).
std::shared_ptr<Runtime> default_runtime(DeviceKind kind);

/// Keras' distribution.process_id() / num_processes() for the default runtime.
int process_id();
int num_processes();

}  // namespace meshlayout
