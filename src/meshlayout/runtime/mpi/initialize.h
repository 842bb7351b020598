// initialize.h — meshlayout's keras.distribution.initialize(): makes the processes of an
// mpirun launch one runtime. After it, list_devices() names the global devices of every
// process (process p owns cpu:p*L … cpu:p*L+L-1) and default_runtime() is this process's
// view, so the same program runs unchanged in one process and under mpirun.
//
// Local devices per process L: `local_devices` if given, else MESHLAYOUT_LOCAL_DEVICES, else
// MESHLAYOUT_CPU_DEVICES / processes (it must divide), else max(1, 8 / processes).
//
// Worker threads per process (the runtime's pool): MESHLAYOUT_THREADS if set, else the node's
// CPUs shared out between the launch's processes on the node, and no more than the CPUs the
// process may run on (pool_threads_per_process). Four processes on two cores get one thread
// each, not two: oversubscribed workers polling for work slowed mapped checkpoint loads by
// ~5% (issue 15, mpi_checkpoint_bench np 4).
//
// Example:
//   int main(int argc, char** argv) {
//     meshlayout::initialize(&argc, &argv);          // picks up `mpirun -np 4`
//     DeviceMesh mesh({2, 4}, {"data", "model"});     // 8 global devices, 2 per process
//     ...
//   }
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "meshlayout/runtime/mpi/mpi_runtime.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {

struct InitializeOptions {
  std::optional<int> num_processes;  // checked against MPI (see mpi_runtime.h)
  std::optional<int> process_id;     // checked against MPI
  std::optional<int64_t> local_devices;
};

/// Initialises MPI and installs the default runtime. Collective. ValueError (the same on
/// every rank) for options that disagree with the launch.
std::shared_ptr<Runtime> initialize(int* argc, char*** argv, const InitializeOptions& options = {});

/// The pool size initialize() gives a process that may run on `available` CPUs, on a node of
/// `node_cpus` CPUs shared by `local_processes` processes of the launch: its share of the node,
/// at most `available`, at least 1.
size_t pool_threads_per_process(size_t available, size_t node_cpus, int local_processes);

/// True when an MPI launcher started this process (mpirun / PMIx environment variables).
bool launched_by_mpirun();

}  // namespace meshlayout
