// collective_timeout.h — an optional deadline on every MPI collective of this process.
//
// A process that is stopped (SIGSTOP), stuck, or running another operation leaves the others
// waiting in a collective forever. With MESHLAYOUT_COLLECTIVE_TIMEOUT=<seconds> set, a
// watchdog thread notices a collective that has not completed in time, prints which one on
// which process, and calls MPI_Abort, which ends every process of the job with exit code 1.
// Unset or 0: no deadline (the default; a long reshard of a huge tensor is not a hang).
//
// Example:
//   MESHLAYOUT_COLLECTIVE_TIMEOUT=30 mpirun -np 4 meshlayout reshard …
//   // meshlayout: process 0: error: MPI_Barrier has not completed after 30 s
//   //   (MESHLAYOUT_COLLECTIVE_TIMEOUT=30): …; aborting every process
//
//   { CollectiveDeadline watch("MPI_Allreduce"); MPI_Allreduce(…); }  // inside the communicator
#pragma once

#include <optional>

namespace meshlayout {

inline constexpr const char* kCollectiveTimeoutEnvVar = "MESHLAYOUT_COLLECTIVE_TIMEOUT";

/// MESHLAYOUT_COLLECTIVE_TIMEOUT in seconds, nullopt when unset or 0; ValueError naming the
/// variable for a value that is not a non-negative number of seconds.
std::optional<double> collective_timeout_seconds();

/// Marks one collective call of this process for the watchdog while it lives. Nests (the
/// outermost call is watched). Costs two atomic stores when no timeout is set.
class CollectiveDeadline {
 public:
  explicit CollectiveDeadline(const char* call);
  ~CollectiveDeadline();
  CollectiveDeadline(const CollectiveDeadline&) = delete;
  CollectiveDeadline& operator=(const CollectiveDeadline&) = delete;

 private:
  bool outermost_ = false;
};

}  // namespace meshlayout
