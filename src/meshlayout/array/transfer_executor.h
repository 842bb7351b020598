// transfer_executor.h — runs a ReshardPlan: copies between devices of this process on the
// thread pool while, on the calling thread, pieces for other processes move straight from
// source shards into destination buffers (Communicator::exchange_boxes; nothing is staged).
// Internal to the array module.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>

#include "meshlayout/array/array.h"
#include "meshlayout/array/reshard_plan.h"

namespace meshlayout::internal_array {

/// The buffer and box of a destination that lives in this process.
using DestinationResolver = std::function<std::pair<std::byte*, Box>(int64_t dst_index)>;

/// Executes `plan` from `src`. Every process of src's runtime must call it with the same plan.
void execute_plan(const ReshardPlan& plan, const Array& src, const DestinationResolver& dst);

}  // namespace meshlayout::internal_array
