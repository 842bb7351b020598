// LeakSanitizer defaults for a program that runs Open MPI: include this header in exactly one
// source file of each such executable (it defines the sanitizer hooks; a static library's
// object would not be linked in, since nothing references them).
//
//   #include "meshlayout/runtime/mpi/mpi_sanitizer_defaults.h"  // in main.cc
//
// Open MPI keeps allocations past MPI_Finalize; LeakSanitizer must not count them as ours.
// Its libraries have no frame pointers, so leak stacks need the slow unwinder to reach them.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
extern "C" const char* __asan_default_options() { return "fast_unwind_on_malloc=0"; }
// Quiet about the suppressions it used: a command's output stays exactly what it printed.
extern "C" const char* __lsan_default_options() { return "print_suppressions=0"; }
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\n"
         "leak:libhwloc.so\nleak:libevent\nleak:mca_\n";
}
#endif
