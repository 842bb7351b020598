// stopped_rank_child.cc — a test program for MESHLAYOUT_COLLECTIVE_TIMEOUT (test-only): under
// mpirun, the last process stops itself (SIGSTOP, as a debugger or a frozen host would) and
// the others enter a barrier. With the timeout set, the job must end with a clear error
// instead of hanging.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "meshlayout/runtime/mpi/initialize.h"
#include "meshlayout/runtime/runtime.h"

int main(int argc, char** argv) {
  auto runtime = meshlayout::initialize(&argc, &argv);
  if (runtime->process_id() == runtime->num_processes() - 1) {
    ::raise(SIGSTOP);
    // Resumed only by mpirun's kill sequence (SIGCONT before SIGTERM) once the watchdog has
    // aborted the job: leave without joining the barrier, or the others could pass it in the
    // moment before SIGTERM lands (that race failed this test about once in two loaded runs).
    std::_Exit(0);
  }
  runtime->comm().barrier();
  std::printf("process %d passed the barrier\n", runtime->process_id());
  return 0;
}
