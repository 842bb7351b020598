// in_process_group.h — the table the ranks of an in-process group share (internal to
// in_process_communicator.cc and in_process_group.cc, not part of the API): one Post per rank,
// the rendezvous, the check of the posts that every rank throws the same verdict of, and
// all_reduce_sum's scratch. NOTE [In-process collectives] in in_process_communicator.cc gives
// the steps a collective runs on it.
//
// Example (every rank of the group, on its own thread):
//   group->post_and_wait(rank, Post{.op = Op::kBroadcast, .send = mine, .recv = mine,
//                                   .bytes = bytes, .root = root});     // step 1
//   if (rank != root) copy_bytes(mine, group->post(root).send, bytes);  // step 2
//   group->wait(rank, Op::kBroadcast);                                  // step 3
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/communicator.h"

namespace meshlayout::in_process_detail {

enum class Op {
  kBarrier,
  kAllGather,
  kAllToAllV,
  kAllReduceSum,
  kReduceScatterSum,
  kBroadcast,
  kExchangeBoxes
};

struct Post {
  Op op = Op::kBarrier;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  size_t bytes = 0;  // all_gather, broadcast
  size_t count = 0;  // reductions
  DType dtype = DType::kF32;
  int root = 0;
  std::span<const size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  std::span<const BoxRegion> send_regions, recv_regions;  // exchange_boxes
};

struct Verdict {
  enum class Kind { kOk, kValue, kInternal } kind = Kind::kOk;
  std::string message;

  void throw_if_failed() const {
    if (kind == Kind::kValue) throw ValueError(message);
    if (kind == Kind::kInternal) throw InternalError(message);
  }
};

class Group {
 public:
  explicit Group(int n) : n_(n), posts_(static_cast<size_t>(n)) {}

  int size() const { return n_; }

  /// Step 1 of a collective; throws the verdict (same on every rank) if the arguments disagree.
  void post_and_wait(int rank, const Post& post);

  /// A plain rendezvous inside a collective (steps 2–3).
  void wait(int rank, Op op);

  /// Rank `rank`'s post of the current collective; valid between its steps 1 and 3.
  const Post& post(int rank) const { return posts_[static_cast<size_t>(rank)]; }

  /// all_reduce_sum's shared sum, sized by the check of step 1.
  std::byte* scratch() { return scratch_.data(); }

  void leave(int rank);

 private:
  // Arrives at the rendezvous and returns the verdict of the table once every rank is there.
  Verdict arrive(std::unique_lock<std::mutex>& lock, int rank, Op op, bool check);

  void throw_if_departed(int rank, Op op) const;

  Verdict check_posts();

  // Every rank sends to k exactly the pieces k expects from it, in the same order and shapes.
  Verdict check_exchange_boxes() const;

  Verdict check_all_to_all_v() const;

  Verdict check_reduction(Op op);

  static Verdict internal(std::string message);

  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;            // guarded by mu_
  uint64_t generation_ = 0;    // guarded by mu_
  Verdict verdict_;            // guarded by mu_
  std::vector<int> departed_;  // guarded by mu_
  // Written under mu_ in step 1, read by every rank until step 3 (see the NOTE).
  std::vector<Post> posts_;
  std::vector<std::byte> scratch_;
};

}  // namespace meshlayout::in_process_detail
