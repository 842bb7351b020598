// message_base.h — message_base(shard): where a Communicator reads a shard's bytes for a send or
// writes them for a receive (runtime/communicator.h's BoxRegion::base). The ops that run
// collectives on shards (ops/partial_sum.cc's reduction, attention's) hand shards to the
// communicator through it and never touch shard bytes themselves: on the CPU kind it is the
// shard's host memory; a device kind whose communicator is device-aware (CUDA-aware MPI, NCCL)
// gets its device address the same way.
//
// Example:
//   sends.push_back(BoxRegion{peer, message_base(partial), partial.box, piece_box});
#pragma once

#include <cstddef>

#include "meshlayout/array/array.h"

namespace meshlayout {

inline std::byte* message_base(const Array::Shard& shard) {
  // The communicator only reads a send's bytes; BoxRegion has one pointer for both directions.
  return const_cast<std::byte*>(shard.buffer.data());
}

}  // namespace meshlayout
