// operation_agreement.h — processes check that they are about to run the same operation
// before its first collective, so a disagreement (one rank given another --to, another mesh,
// another device count) is one clear error on every process instead of a deadlock.
//
// Each process describes the operation as `key=value` fields joined by "; ". One fixed-size
// all_gather compares a hash of every description; only when they differ are the two
// descriptions exchanged to name the first field that differs.
//
// Example (every process, before running a reshard):
//   agree_on_operation(comm, "reshard", "shape=(8, 6); dtype=F32; to=layout[None,model]");
//   // process 3 was given --to data,None: every process throws
//   // ValueError: processes disagree on reshard: process 3 has to=layout[data,None] but
//   //   process 0 has to=layout[None,model]; …
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <string_view>

#include "meshlayout/runtime/communicator.h"

namespace meshlayout {

/// Collective over `comm`. Returns when every rank passed the same `description`; otherwise
/// every rank throws the same ValueError naming `what`, the first rank whose description
/// differs from rank 0's, the first field that differs, and how many other ranks differ.
void agree_on_operation(Communicator& comm, std::string_view what, std::string_view description);

/// agree_on_failure(comm, local_error) and then agree_on_operation, in the one all_gather
/// agree_on_operation makes when no rank failed (a second agreement runs only if one did).
/// A failure wins over a disagreement, as it would calling the two in that order. A group of
/// one rank runs agree_on_failure alone.
/// Why: every collective is a synchronisation point that costs a scheduling round when
/// processes outnumber cores; a reshard used to make three before moving any data.
/// Example: agree_on_operation(comm, "reshard", description, allocation_error);
void agree_on_operation(Communicator& comm, std::string_view what, std::string_view description,
                        const std::exception_ptr& local_error);

/// The fixed-size record agree_on_operation all-gathers: a hash and the length of the
/// description, and whether this rank failed. For callers that gather the records themselves
/// along with other work (Communicator::exchange_boxes_if_agreed, so a reshard's transfers
/// between agreeing processes start before the last process arrives).
struct OperationRecord {
  uint64_t hash = 0;
  uint64_t bytes = 0;
  uint64_t failed = 0;
};
OperationRecord operation_record(std::string_view description, bool failed);

/// What agree_on_operation(comm, what, description, local_error) decides once every rank's
/// record (`all`, rank order) is known: returns if none failed and all descriptions agree,
/// else every rank throws the same error (collective only on those paths, which every rank
/// takes alike since all hold the same records).
/// Example: std::vector<OperationRecord> all(comm.size());  // gathered by the caller
///          settle_operation_agreement(comm, "reshard", description, error, all);
void settle_operation_agreement(Communicator& comm, std::string_view what,
                                std::string_view description, const std::exception_ptr& local_error,
                                std::span<const OperationRecord> all);

/// The description fields joined: fields({"a=1", "b=2"}) == "a=1; b=2". Values should not
/// contain "; " (it separates fields in the message; the hash covers every byte anyway).
std::string describe_fields(std::initializer_list<std::string> fields);

}  // namespace meshlayout
