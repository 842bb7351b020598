// stopped_rank_child.cc — a test program for MESHLAYOUT_COLLECTIVE_TIMEOUT (test-only): under
// mpirun, the last process stops itself (SIGSTOP, as a debugger or a frozen host would) and
// the others enter a barrier. With the timeout set, the job must end with a clear error
// instead of hanging.
#include <signal.h>

#include <cstdio>

#include "meshlayout/runtime/mpi/initialize.h"
#include "meshlayout/runtime/runtime.h"

int main(int argc, char** argv) {
  auto runtime = meshlayout::initialize(&argc, &argv);
  if (runtime->process_id() == runtime->num_processes() - 1) ::raise(SIGSTOP);
  runtime->comm().barrier();
  std::printf("process %d passed the barrier\n", runtime->process_id());
  return 0;
}
