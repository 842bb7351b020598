// transfer_executor.h — runs a ReshardPlan: copies between devices of this process on the
// thread pool while, on the calling thread, pieces for other processes move straight from
// source shards into destination buffers (Communicator::exchange_boxes; nothing is staged).
// Internal to the array module.
//
// Example (distribute_tensor into a fresh destination):
//   ExchangeAgreement agreement{std::as_bytes(std::span(&record, 1)), {}};
//   execute_plan(plan, src, [&](int64_t q) { return std::make_pair(data(q), box(q)); },
//                &agreement);   // then settle_operation_agreement(..., agreement.all)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/array/reshard_plan.h"

namespace meshlayout::internal_array {

/// The buffer and box of a destination that lives in this process.
using DestinationResolver = std::function<std::pair<std::byte*, Box>(int64_t dst_index)>;

/// Agreeing while exchanging (Communicator::exchange_boxes_if_agreed): `header` is this
/// process's; every process's header lands in `all`, rank order.
struct ExchangeAgreement {
  std::span<const std::byte> header;
  std::vector<std::byte> all;
};

/// Executes `plan` from `src`. Every process of src's runtime must call it with the same plan.
/// With `agreement` (several processes, a destination the caller drops on failure), the
/// pieces of a pair of processes move only if their headers agree, and the copies inside this
/// process run regardless; the caller settles the agreement from `agreement->all` afterwards.
/// Why: agreeing first made every transfer wait for the last process to arrive (NOTE [Agreed
/// exchange], runtime/mpi/mpi_exchange.cc).
/// `dst_on_host`: the destinations are host memory (a gather), not shards of src's kind.
void execute_plan(const ReshardPlan& plan, const Array& src, const DestinationResolver& dst,
                  ExchangeAgreement* agreement = nullptr, bool dst_on_host = false);

}  // namespace meshlayout::internal_array
