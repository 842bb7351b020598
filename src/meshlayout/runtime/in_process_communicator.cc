#include "meshlayout/runtime/in_process_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/in_process_group.h"

namespace meshlayout {
namespace {

using in_process_detail::Group;
using in_process_detail::Op;
using in_process_detail::Post;

// NOTE [In-process collectives]
// The ranks of a group share a Group: a table with one Post per rank (the collective it
// called and its pointers and counts), a rendezvous (mutex, condition variable, generation
// counter) and a scratch buffer. Every collective runs the same steps on every rank:
//   1. post: write my Post, arrive. The last rank to arrive checks the whole table once,
//      under the lock, and stores the verdict; every rank reads that same verdict, so either
//      all throw (same type, same text) or none does — nobody is left waiting, and the group
//      stays usable after the error.
//   2. copy: each rank reads the other ranks' buffers directly and writes only its own output.
//   3. arrive again, so that no rank returns (and reuses a buffer) while another still reads it.
// all_reduce_sum is in place, so it splits step 2: rank r sums elements of chunk r from all
// ranks into the shared scratch; a rendezvous ensures every input was read; then every rank
// copies the whole scratch into its own data. The sum runs in rank order, once per element, so
// every rank gets bit-identical results. The mutex orders each rank's writes before the other
// ranks' reads, so the protocol is clean under ThreadSanitizer.

void copy_bytes(std::byte* to, const std::byte* from, size_t n) {
  if (n > 0) std::memcpy(to, from, n);
}

template <typename T>
void add_into(std::byte* acc, const std::byte* in, size_t count) {
  // memcpy-based loads and stores: the buffers are raw bytes, not necessarily aligned for T.
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in + i * sizeof(T), sizeof(T));
    a = static_cast<T>(a + b);
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

// acc[i] += in[i] for `count` elements of `dtype` (one of the reducible dtypes).
void add_into(std::byte* acc, const std::byte* in, size_t count, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return add_into<float>(acc, in, count);
    case DType::kF64:
      return add_into<double>(acc, in, count);
    case DType::kI32:
      return add_into<int32_t>(acc, in, count);
    case DType::kI64:
      return add_into<int64_t>(acc, in, count);
    default:
      throw InternalError(fmt::format("add_into called with dtype {}", dtype_name(dtype)));
  }
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  ~InProcessCommunicator() override { group_->leave(rank_); }
  InProcessCommunicator(const InProcessCommunicator&) = delete;
  InProcessCommunicator& operator=(const InProcessCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string_view backend() const override { return "in-process"; }

  void barrier() override { group_->post_and_wait(rank_, Post{.op = Op::kBarrier}); }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    auto* out = static_cast<std::byte*>(recv);
    group_->post_and_wait(rank_, Post{.op = Op::kAllGather,
                                      .send = static_cast<const std::byte*>(send),
                                      .recv = out,
                                      .bytes = bytes});
    for (int k = 0; k < size(); ++k) {
      std::byte* to = out + static_cast<size_t>(k) * bytes;
      if (to == group_->post(k).send) continue;  // in place: my block already holds my data
      copy_bytes(to, group_->post(k).send, bytes);
    }
    group_->wait(rank_, Op::kAllGather);
  }

  void all_to_all_v(const void* send, std::span<const size_t> send_counts,
                    std::span<const size_t> send_offsets, void* recv,
                    std::span<const size_t> recv_counts,
                    std::span<const size_t> recv_offsets) override {
    auto* out = static_cast<std::byte*>(recv);
    group_->post_and_wait(rank_, Post{.op = Op::kAllToAllV,
                                      .send = static_cast<const std::byte*>(send),
                                      .recv = out,
                                      .send_counts = send_counts,
                                      .send_offsets = send_offsets,
                                      .recv_counts = recv_counts,
                                      .recv_offsets = recv_offsets});
    const auto me = static_cast<size_t>(rank_);
    for (int k = 0; k < size(); ++k) {
      const Post& from = group_->post(k);
      copy_bytes(out + recv_offsets[static_cast<size_t>(k)], from.send + from.send_offsets[me],
                 from.send_counts[me]);
    }
    group_->wait(rank_, Op::kAllToAllV);
  }

  void exchange_boxes(std::span<const BoxRegion> sends, std::span<const BoxRegion> recvs,
                      size_t element_size) override {
    group_->post_and_wait(
        rank_, Post{.op = Op::kExchangeBoxes, .send_regions = sends, .recv_regions = recvs});
    // My i-th receive from peer p is p's i-th send to me; copy straight from p's buffer.
    std::vector<size_t> next(static_cast<size_t>(size()), 0);
    std::vector<std::vector<const BoxRegion*>> from(static_cast<size_t>(size()));
    for (int p = 0; p < size(); ++p) {
      for (const BoxRegion& s : group_->post(p).send_regions) {
        if (s.peer == rank_) from[static_cast<size_t>(p)].push_back(&s);
      }
    }
    for (const BoxRegion& r : recvs) {
      const size_t p = static_cast<size_t>(r.peer);
      copy_region(*from[p][next[p]++], r, element_size);
    }
    group_->wait(rank_, Op::kExchangeBoxes);  // nobody reads my send buffers any more
  }

  void all_reduce_sum(void* data, size_t count, DType dtype) override {
    auto* mine = static_cast<std::byte*>(data);
    group_->post_and_wait(
        rank_,
        Post{.op = Op::kAllReduceSum, .send = mine, .recv = mine, .count = count, .dtype = dtype});
    const size_t n = static_cast<size_t>(size());
    const size_t esize = dtype_size(dtype);
    const size_t chunk = (count + n - 1) / n;
    const size_t begin = std::min(count, static_cast<size_t>(rank_) * chunk);
    const size_t end = std::min(count, begin + chunk);
    std::byte* sum = group_->scratch() + begin * esize;
    copy_bytes(sum, group_->post(0).send + begin * esize, (end - begin) * esize);
    for (int k = 1; k < size(); ++k) {
      add_into(sum, group_->post(k).send + begin * esize, end - begin, dtype);
    }
    group_->wait(rank_, Op::kAllReduceSum);  // every input read, every chunk summed
    copy_bytes(mine, group_->scratch(), count * esize);
  }

  void reduce_scatter_sum(const void* send, void* recv, size_t count, DType dtype) override {
    group_->post_and_wait(rank_, Post{.op = Op::kReduceScatterSum,
                                      .send = static_cast<const std::byte*>(send),
                                      .recv = static_cast<std::byte*>(recv),
                                      .count = count,
                                      .dtype = dtype});
    const size_t block = count * dtype_size(dtype);
    const size_t offset = static_cast<size_t>(rank_) * block;
    std::vector<std::byte> sum(block);
    copy_bytes(sum.data(), group_->post(0).send + offset, block);
    for (int k = 1; k < size(); ++k) {
      add_into(sum.data(), group_->post(k).send + offset, count, dtype);
    }
    group_->wait(rank_, Op::kReduceScatterSum);  // nobody reads my send any more
    copy_bytes(static_cast<std::byte*>(recv), sum.data(), block);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    auto* mine = static_cast<std::byte*>(data);
    group_->post_and_wait(
        rank_,
        Post{.op = Op::kBroadcast, .send = mine, .recv = mine, .bytes = bytes, .root = root});
    if (rank_ != root) copy_bytes(mine, group_->post(root).send, bytes);
    group_->wait(rank_, Op::kBroadcast);
  }

 private:
  std::shared_ptr<Group> group_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_group(int n) {
  if (n < 1) {
    throw ValueError(fmt::format("an in-process group needs at least 1 rank, got {}", n));
  }
  auto group = std::make_shared<Group>(n);
  std::vector<std::unique_ptr<Communicator>> ranks;
  ranks.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return ranks;
}

void run_in_process_group(int n, const std::function<void(Communicator&)>& fn) {
  std::vector<std::unique_ptr<Communicator>> ranks = make_in_process_group(n);
  std::mutex mu;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  try {
    for (std::unique_ptr<Communicator>& rank : ranks) {
      threads.emplace_back([&fn, &mu, &first_error, comm = std::move(rank)]() mutable {
        try {
          fn(*comm);
        } catch (...) {
          std::lock_guard lock(mu);
          if (!first_error) first_error = std::current_exception();
        }
        comm.reset();  // leaves the group: a rank still waiting for this one throws, not hangs
      });
    }
  } catch (...) {
    // A thread could not start: the ranks without one leave, so the started ones end.
    ranks.clear();
    for (std::thread& t : threads) t.join();
    throw;
  }
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace meshlayout
