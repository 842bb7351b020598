#include "meshlayout/runtime/in_process_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

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

enum class Op {
  kBarrier,
  kAllGather,
  kAllToAllV,
  kAllReduceSum,
  kReduceScatterSum,
  kBroadcast,
  kExchangeBoxes
};

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kBarrier:
      return "barrier";
    case Op::kAllGather:
      return "all_gather";
    case Op::kAllToAllV:
      return "all_to_all_v";
    case Op::kAllReduceSum:
      return "all_reduce_sum";
    case Op::kReduceScatterSum:
      return "reduce_scatter_sum";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kExchangeBoxes:
      return "exchange_boxes";
  }
  return "unknown collective";
}

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

bool is_reducible(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kI32 ||
         dtype == DType::kI64;
}

void copy_bytes(std::byte* to, const std::byte* from, size_t n) {
  if (n > 0) std::memcpy(to, from, n);
}

class Group {
 public:
  explicit Group(int n) : n_(n), posts_(static_cast<size_t>(n)) {}

  int size() const { return n_; }

  /// Step 1 of a collective; throws the verdict (same on every rank) if the arguments disagree.
  void post_and_wait(int rank, const Post& post) {
    std::unique_lock lock(mu_);
    throw_if_departed(rank, post.op);
    posts_[static_cast<size_t>(rank)] = post;
    Verdict verdict = arrive(lock, rank, post.op, /*check=*/true);
    lock.unlock();
    verdict.throw_if_failed();
  }

  /// A plain rendezvous inside a collective (steps 2–3).
  void wait(int rank, Op op) {
    std::unique_lock lock(mu_);
    throw_if_departed(rank, op);
    arrive(lock, rank, op, /*check=*/false);
  }

  /// Rank `rank`'s post of the current collective; valid between its steps 1 and 3.
  const Post& post(int rank) const { return posts_[static_cast<size_t>(rank)]; }

  /// all_reduce_sum's shared sum, sized by the check of step 1.
  std::byte* scratch() { return scratch_.data(); }

  void leave(int rank) {
    std::lock_guard lock(mu_);
    departed_.push_back(rank);
    cv_.notify_all();
  }

 private:
  // Arrives at the rendezvous and returns the verdict of the table once every rank is there.
  Verdict arrive(std::unique_lock<std::mutex>& lock, int rank, Op op, bool check) {
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      verdict_ = check ? check_posts() : Verdict{};
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return verdict_;
    }
    cv_.wait(lock, [&] { return generation_ != generation || !departed_.empty(); });
    if (generation_ == generation) throw_if_departed(rank, op);
    return verdict_;
  }

  void throw_if_departed(int rank, Op op) const {
    if (departed_.empty()) return;
    throw FailedPreconditionError(fmt::format(
        "in-process group of {} ranks: rank {} is in {} but rank{} [{}] left the group (its "
        "communicator was destroyed, e.g. its thread returned or threw); every rank must make "
        "the same collective calls",
        n_, rank, op_name(op), departed_.size() == 1 ? "" : "s", fmt::join(departed_, ", ")));
  }

  Verdict check_posts() {
    const Post& first = posts_[0];
    for (const Post& p : posts_) {
      if (p.op != first.op) {
        std::vector<std::string> calls;
        for (int r = 0; r < n_; ++r) {
          calls.push_back(fmt::format("rank {}: {}", r, op_name(post(r).op)));
        }
        return internal(
            fmt::format("ranks called different collectives ({}); every rank must call the same "
                        "collectives in the same order",
                        fmt::join(calls, ", ")));
      }
    }
    switch (first.op) {
      case Op::kBarrier:
        return {};
      case Op::kAllGather:
        for (int r = 1; r < n_; ++r) {
          if (post(r).bytes != first.bytes) {
            return internal(fmt::format(
                "all_gather: rank 0 contributes {} bytes but rank {} contributes {}; every rank "
                "must pass the same byte count",
                first.bytes, r, post(r).bytes));
          }
        }
        return {};
      case Op::kAllToAllV:
        return check_all_to_all_v();
      case Op::kExchangeBoxes:
        return check_exchange_boxes();
      case Op::kAllReduceSum:
      case Op::kReduceScatterSum:
        return check_reduction(first.op);
      case Op::kBroadcast:
        for (int r = 1; r < n_; ++r) {
          if (post(r).root != first.root) {
            return internal(fmt::format("broadcast: rank 0 names root {} but rank {} names root {}",
                                        first.root, r, post(r).root));
          }
          if (post(r).bytes != first.bytes) {
            return internal(fmt::format(
                "broadcast: rank 0 passes {} bytes but rank {} passes {}; every rank must pass "
                "the same byte count",
                first.bytes, r, post(r).bytes));
          }
        }
        if (first.root < 0 || first.root >= n_) {
          return {Verdict::Kind::kValue,
                  fmt::format("broadcast root {} is out of range for a group of {} rank{}; "
                              "expected 0 to {}",
                              first.root, n_, n_ == 1 ? "" : "s", n_ - 1)};
        }
        return {};
    }
    return internal("unknown collective in the in-process group");
  }

  // Every rank sends to k exactly the pieces k expects from it, in the same order and shapes.
  Verdict check_exchange_boxes() const {
    for (int r = 0; r < n_; ++r) {
      for (const auto* regions : {&post(r).send_regions, &post(r).recv_regions}) {
        for (const BoxRegion& g : *regions) {
          if (g.peer < 0 || g.peer >= n_) {
            return {Verdict::Kind::kValue,
                    fmt::format("exchange_boxes: rank {} names peer {}; expected 0 to {}", r,
                                g.peer, n_ - 1)};
          }
        }
      }
    }
    for (int r = 0; r < n_; ++r) {
      for (int k = 0; k < n_; ++k) {
        std::vector<const Box*> sent, expected;
        for (const BoxRegion& s : post(r).send_regions) {
          if (s.peer == k) sent.push_back(&s.piece);
        }
        for (const BoxRegion& e : post(k).recv_regions) {
          if (e.peer == r) expected.push_back(&e.piece);
        }
        if (sent.size() != expected.size()) {
          return internal(fmt::format(
              "exchange_boxes: rank {} sends {} regions to rank {}, which expects {}", r,
              sent.size(), k, expected.size()));
        }
        for (size_t i = 0; i < sent.size(); ++i) {
          if (sent[i]->shape != expected[i]->shape) {
            return internal(fmt::format(
                "exchange_boxes: region {} from rank {} to rank {} has shape {} but is "
                "received as shape {}",
                i, r, k, shape_to_string(sent[i]->shape), shape_to_string(expected[i]->shape)));
          }
        }
      }
    }
    return {};
  }

  Verdict check_all_to_all_v() const {
    for (int r = 0; r < n_; ++r) {
      const Post& p = post(r);
      const std::pair<std::string_view, size_t> spans[] = {{"send_counts", p.send_counts.size()},
                                                           {"send_offsets", p.send_offsets.size()},
                                                           {"recv_counts", p.recv_counts.size()},
                                                           {"recv_offsets", p.recv_offsets.size()}};
      for (const auto& [name, entries] : spans) {
        if (entries != static_cast<size_t>(n_)) {
          return internal(
              fmt::format("all_to_all_v: rank {} passed {} with {} entries; expected {} (one per "
                          "rank)",
                          r, name, entries, n_));
        }
      }
    }
    std::string first_mismatch;
    int mismatches = 0;
    for (int r = 0; r < n_; ++r) {
      for (int k = 0; k < n_; ++k) {
        const size_t sent = post(r).send_counts[static_cast<size_t>(k)];
        const size_t expected = post(k).recv_counts[static_cast<size_t>(r)];
        if (sent == expected) continue;
        if (mismatches++ == 0) {
          first_mismatch = fmt::format(
              "rank {} sends {} bytes to rank {} but rank {} expects {} "
              "bytes from rank {}",
              r, sent, k, k, expected, r);
        }
      }
    }
    if (mismatches == 0) return {};
    return internal(fmt::format("all_to_all_v: {}{}", first_mismatch,
                                mismatches == 1
                                    ? std::string()
                                    : fmt::format(" ({} mismatching pairs in all)", mismatches)));
  }

  Verdict check_reduction(Op op) {
    const Post& first = posts_[0];
    for (int r = 1; r < n_; ++r) {
      if (post(r).count != first.count || post(r).dtype != first.dtype) {
        return internal(fmt::format(
            "{}: rank 0 passes {} elements of {} but rank {} passes {} elements of {}", op_name(op),
            first.count, dtype_name(first.dtype), r, post(r).count, dtype_name(post(r).dtype)));
      }
    }
    if (!is_reducible(first.dtype)) {
      return {Verdict::Kind::kValue,
              fmt::format("{} does not support dtype {}; supported: F32, F64, I32, I64",
                          op_name(op), dtype_name(first.dtype))};
    }
    if (op == Op::kAllReduceSum) scratch_.resize(first.count * dtype_size(first.dtype));
    return {};
  }

  static Verdict internal(std::string message) {
    return {Verdict::Kind::kInternal, std::move(message)};
  }

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
    group_->post_and_wait(rank_, Post{.op = Op::kExchangeBoxes,
                                      .send_regions = sends,
                                      .recv_regions = recvs});
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
