// mpi_cma_probe.h — what the two halves of the cross-memory-attach probe (issue 15; see
// mpi_cma_probe.cc's comment) share: a collective timing of one run (the slowest process's
// wall time and the CPU time summed over processes), and the reshard half
// (mpi_cma_reshard_probe.cc), which main calls after the loads. Plain MPI and system calls, no
// meshlayout code; best and median come from bench_util.h.
//
// Example:
//   const cma_probe::Sample s = cma_probe::time_once([&] { load(); });   // every process calls
//   if (me == 0) std::printf("%.1f ms wall, %.1f ms CPU\n", s.wall * 1e3, s.cpu * 1e3);
#pragma once

#include <mpi.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace cma_probe {

/// This process's user + system CPU seconds so far.
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Sample {
  double wall, cpu;  // slowest process's wall time; CPU time summed over processes
};

/// Times fn() on every process after a barrier (collective).
inline Sample time_once(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime(), c0 = cpu_seconds();
  fn();
  Sample s{MPI_Wtime() - t0, cpu_seconds() - c0};
  MPI_Allreduce(MPI_IN_PLACE, &s.wall, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &s.cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return s;
}

/// The reshard half of the probe (mpi_cma_reshard_probe.cc): rows -> columns of a 4096 x 4096
/// f32 array over `local` devices a process, `reps` timed runs of each method; `pids` are every
/// process's pid (for process_vm_writev). Returns the mismatches against MPI datatypes' result.
int reshard_probe(int me, int procs, int64_t local, int reps, const std::vector<pid_t>& pids);

}  // namespace cma_probe
