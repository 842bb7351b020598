// in_process_communicator.h — N ranks as threads of one process, sharing memory.
//
// make_in_process_group(n) (declared in communicator.h) returns the n communicators; this
// header adds run_in_process_group(), which runs one function per rank on its own thread —
// the way tests and single-process programs drive a group. See NOTE [In-process collectives]
// in the .cc for how a collective meets, checks its arguments and copies.
//
// Example:
//   run_in_process_group(4, [](Communicator& comm) {
//     int64_t v = comm.rank() + 1;
//     comm.all_reduce_sum(&v, 1, DType::kI64);   // v == 10 on every rank
//   });
//
// Misuse is reported, not hung on: ranks that call different collectives, or disagree on
// counts, roots or dtypes, all throw the same InternalError (ValueError for an unsupported
// dtype or a root out of range) naming the ranks and values, and the group stays usable.
// If a rank's communicator is destroyed (its thread returned or threw) while others wait in a
// collective, they throw FailedPreconditionError instead of waiting forever.
#pragma once

#include <functional>

#include "meshlayout/runtime/communicator.h"

namespace meshlayout {

/// Runs `fn(comm)` for each rank of a new in-process group of `n` ranks, rank i on thread i,
/// and returns when all have finished. If any rank throws, rethrows the exception thrown first
/// (the root cause; ranks that then find it gone throw FailedPreconditionError).
/// \error ValueError if n < 1.
void run_in_process_group(int n, const std::function<void(Communicator&)>& fn);

}  // namespace meshlayout
