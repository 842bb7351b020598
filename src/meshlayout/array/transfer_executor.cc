#include "meshlayout/array/transfer_executor.h"

#include <fmt/format.h>

#include <algorithm>

#include "meshlayout/layout/box_ops.h"
#include "meshlayout/core/errors.h"

namespace meshlayout::internal_array {
void execute_plan(const ReshardPlan& plan, const Array& src, const DestinationResolver& dst,
                  const std::function<void()>& before_exchange) {
  Runtime& rt = src.runtime();
  const int me = rt.process_id();
  const size_t elem = dtype_size(src.dtype());

  // Copies inside this process. Pieces of one destination never overlap, so every transfer can
  // run on its own thread.
  std::vector<const Transfer*> local;
  for (const Transfer& t : plan.transfers) {
    if (t.src_process == me && t.dst_process == me) local.push_back(&t);
  }
  // Pieces crossing processes go straight from source shards into destination buffers, in plan
  // order on both sides (which is how exchange_boxes pairs them). Pieces are cut below 1 GiB
  // so every MPI message count fits an int; both sides cut them alike.
  std::vector<BoxRegion> sends, recvs;
  const bool several = rt.num_processes() > 1;
  if (several) {
    const int64_t max_elements = (int64_t{1} << 30) / static_cast<int64_t>(elem);
    for (const Transfer& t : plan.transfers) {
      if (t.src_process == t.dst_process || (t.src_process != me && t.dst_process != me)) continue;
      for (Box& piece : split_box(t.box, max_elements)) {
        if (t.src_process == me) {
          const Array::Shard* s = src.shard_at(t.src_position);
          sends.push_back(BoxRegion{t.dst_process, const_cast<std::byte*>(s->buffer.data()), s->box, piece});
        } else {
          auto [data, box] = dst(t.dst_index);
          recvs.push_back(BoxRegion{t.src_process, data, box, std::move(piece)});
        }
      }
    }
  }
  // The agreement, then the exchange, run on this thread while the pool's workers do the
  // local copies.
  std::function<void()> first;
  if (before_exchange || several) {
    first = [&] {
      if (before_exchange) before_exchange();
      if (several) rt.comm().exchange_boxes(sends, recvs, elem);
    };
  }
  rt.pool().parallel_for_after(first, local.size(), [&](size_t i) {
        const Transfer& t = *local[i];
        const Array::Shard* s = src.shard_at(t.src_position);
        auto [dst_data, dst_box] = dst(t.dst_index);
        copy_box(s->buffer.data(), s->box, dst_data, dst_box, t.box, elem);
      });
}

}  // namespace meshlayout::internal_array
