// mpi_runtime.h — starting and stopping MPI for meshlayout (target meshlayout_mpi).
//
// initialize_mpi() is meshlayout's keras.distribution.initialize() for MPI: it initialises
// MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED requested) unless the program already did,
// builds the communicator of MPI_COMM_WORLD, and checks the process count and id the caller
// expects. MPI fixes both at launch (`mpirun -np N`), so explicit values cannot win over MPI
// as they do over Keras' environment variables: they are checked, and every rank throws the
// same ValueError naming both values if one disagrees. An option left unset is taken from
// KERAS_DISTRIBUTION_NUM_PROCESSES / KERAS_DISTRIBUTION_PROCESS_ID when those are set
// (explicit options win over the environment, as in Keras), and checked the same way.
//
// Example:
//   int main(int argc, char** argv) {
//     MpiContext mpi = initialize_mpi(&argc, &argv, {.num_processes = 4});
//     mpi.world->barrier();
//     finalize_mpi();   // also run at exit if forgotten, see finalize_mpi()
//   }
#pragma once

#include <memory>
#include <optional>

#include "meshlayout/runtime/mpi/mpi_communicator.h"

namespace meshlayout {

struct MpiInitOptions {
  /// Expected number of processes (MPI_COMM_WORLD size).
  std::optional<int> num_processes;
  /// Expected id of this process (its rank in MPI_COMM_WORLD).
  std::optional<int> process_id;
};

struct MpiContext {
  int process_id = 0;
  int num_processes = 1;
  /// The MPI_THREAD_* level MPI provides.
  int thread_level = 0;
  /// True when a launcher started the process (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK is
  /// set). A program started directly runs as an MPI singleton: process 0 of 1.
  bool launched_by_mpirun = false;
  /// The processes of this launch on this process's node (MPI_COMM_TYPE_SHARED), itself included.
  int local_processes = 1;
  /// The collectives over MPI_COMM_WORLD (shared by every initialize_mpi() result).
  std::shared_ptr<MpiCommunicator> world;
};

/// Initialises MPI once per process (later calls return the same context and only check
/// their options) and checks `options` against what MPI reports; see the file comment.
/// `argc` / `argv` may be null. Collective: every process must call it.
/// \error ValueError (the same on every rank) if an option or its environment variable is
///   malformed or disagrees with MPI.
/// \error FailedPreconditionError if MPI was finalized already.
MpiContext initialize_mpi(int* argc, char*** argv, const MpiInitOptions& options = {});

/// This process's rank in MPI_COMM_WORLD, as of initialize_mpi(); 0 before it.
int mpi_process_id();
/// The number of MPI processes, as of initialize_mpi(); 1 before it.
int mpi_num_processes();
/// The world communicator built by initialize_mpi().
/// \error FailedPreconditionError before initialize_mpi() or after finalize_mpi().
MpiCommunicator& mpi_world();

/// Finalises MPI if it is initialised and not yet finalised; otherwise does nothing.
/// Collective. initialize_mpi() also registers it to run at exit for a program that forgot;
/// at exit it first waits (up to 30 s) for every rank to reach exit too, and if some rank
/// does not — it is stuck or failed — leaves MPI unfinalised, so mpirun ends the job instead
/// of this rank hanging in MPI_Finalize.
void finalize_mpi();

}  // namespace meshlayout
