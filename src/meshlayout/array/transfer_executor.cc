#include "meshlayout/array/transfer_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/runtime/device_memory.h"

namespace meshlayout::internal_array {
namespace {

// NOTE [Copy slabs]: local pieces are copied in slabs of at most this many bytes (whole rows
// of the piece where a row fits), so the pool balances uneven pieces and the caller, back from
// the exchange, finds work left to share.
// Copies stay memcpy (copy_box): non-temporal stores for pieces of 4 MiB or more measured
// slower here (reshard_bench, one process: ReplicatedToSharded 13.7 ms against 9.0-9.6 ms,
// RowsToColumns256MiB 31-34 ms against 24-26 ms), though a lone 8 MiB strided copy gained 25%.
constexpr int64_t kCopySlabBytes = int64_t{1} << 20;

}  // namespace

namespace {

// A plan between devices of a kind other than the CPU (one process: default_runtime(kind)
// refuses several): each piece is one strided copy through the source device's memory
// (DeviceMemory::copy_strided: cudaMemcpy2DAsync on the GPU's stream, in issue order, no host
// round trip), or towards the host for a gather.
void execute_plan_on_devices(const ReshardPlan& plan, const Array& src,
                             const DestinationResolver& dst, bool dst_on_host) {
  Runtime& rt = src.runtime();
  const size_t elem = dtype_size(src.dtype());
  // Pieces between devices of one physical device (one memory) run as one batch (one kernel
  // launch on a GPU); pieces towards the host or another GPU one by one.
  std::map<DeviceMemory*, std::vector<BoxCopy>> batches;
  for (const Transfer& t : plan.transfers) {
    const Array::Shard* s = src.shard_at(t.src_position);
    DeviceMemory& from = rt.device(s->device_id).memory().device_memory();
    auto [dst_data, dst_box] = dst(t.dst_index);
    DeviceMemory* to = dst_on_host || t.dst_device < 0
                           ? nullptr
                           : &rt.device(t.dst_device).memory().device_memory();
    if (to == &from) {
      BoxCopy c = plan_box_copy(CopyDirection::kDeviceToDevice, dst_data, dst_box, s->buffer.data(),
                                s->box, t.box, elem);
      if (c.run_bytes > 0) batches[&from].push_back(std::move(c));
      continue;
    }
    // Devices on two physical GPUs have two streams: order the copy after the destination's
    // pending work, and what follows on the destination after the copy.
    const bool two_streams = to != nullptr;
    if (two_streams) to->synchronize();
    copy_box_through(from,
                     dst_on_host ? CopyDirection::kDeviceToHost : CopyDirection::kDeviceToDevice,
                     dst_data, dst_box, s->buffer.data(), s->box, t.box, elem);
    if (two_streams) from.synchronize();
  }
  for (auto& [memory, copies] : batches) {
    std::vector<StridedCopy> batch;
    batch.reserve(copies.size());
    for (const BoxCopy& c : copies) batch.push_back(c.copy());
    memory->copy_strided_batch(batch);
  }
}

}  // namespace

void execute_plan(const ReshardPlan& plan, const Array& src, const DestinationResolver& dst,
                  ExchangeAgreement* agreement, bool dst_on_host) {
  Runtime& rt = src.runtime();
  const int me = rt.process_id();
  const size_t elem = dtype_size(src.dtype());
  if (rt.device_kind() != DeviceKind::kCpu) {
    execute_plan_on_devices(plan, src, dst, dst_on_host);
    return;
  }

  // Copies inside this process, cut into slabs of about kCopySlabBytes so that the caller can
  // share them with the workers once its own part is done. Pieces of one destination never
  // overlap, so every slab can run on its own thread.
  struct Copy {
    const Transfer* transfer;
    Box box;
  };
  std::vector<Copy> local;
  const int64_t slab_elements = std::max<int64_t>(1, kCopySlabBytes / static_cast<int64_t>(elem));
  for (const Transfer& t : plan.transfers) {
    if (t.src_process != me || t.dst_process != me) continue;
    for (Box& slab : split_box(t.box, slab_elements)) local.push_back({&t, std::move(slab)});
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
          sends.push_back(
              BoxRegion{t.dst_process, const_cast<std::byte*>(s->buffer.data()), s->box, piece});
        } else {
          auto [data, box] = dst(t.dst_index);
          recvs.push_back(BoxRegion{t.src_process, data, box, std::move(piece)});
        }
      }
    }
  }
  auto copy = [&](size_t i) {
    const Transfer& t = *local[i].transfer;
    const Array::Shard* s = src.shard_at(t.src_position);
    auto [dst_data, dst_box] = dst(t.dst_index);
    copy_box(s->buffer.data(), s->box, dst_data, dst_box, local[i].box, elem);
  };
  auto exchange = [&](const std::function<void()>& meanwhile) {
    if (agreement != nullptr) {
      agreement->all =
          rt.comm().exchange_boxes_if_agreed(agreement->header, sends, recvs, elem, meanwhile);
    } else {
      if (meanwhile) meanwhile();
      if (several) rt.comm().exchange_boxes(sends, recvs, elem);
    }
  };
  if (plan.bytes_between_processes == 0) {
    // Nothing crosses processes: every thread (the caller too) copies while the agreement's
    // headers travel; the caller then waits for the other processes' headers.
    exchange([&] { rt.pool().parallel_for(local.size(), copy); });
    return;
  }
  // The exchange (and agreement) runs on this thread, which must stay in MPI to progress the
  // transfers, while the pool's workers do the local copies; the caller then helps with what
  // is left.
  rt.pool().parallel_for_after([&] { exchange(nullptr); }, local.size(), copy);
}

}  // namespace meshlayout::internal_array
