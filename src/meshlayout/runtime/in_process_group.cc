// in_process_group.cc — the in-process group's shared table (in_process_group.h): the
// rendezvous of each collective step and the check of every rank's arguments, whose verdict
// every rank throws alike.
#include "meshlayout/runtime/in_process_group.h"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"

namespace meshlayout::in_process_detail {
namespace {

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

bool is_reducible(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kI32 ||
         dtype == DType::kI64;
}

}  // namespace

void Group::post_and_wait(int rank, const Post& post) {
  std::unique_lock lock(mu_);
  throw_if_departed(rank, post.op);
  posts_[static_cast<size_t>(rank)] = post;
  Verdict verdict = arrive(lock, rank, post.op, /*check=*/true);
  lock.unlock();
  verdict.throw_if_failed();
}

void Group::wait(int rank, Op op) {
  std::unique_lock lock(mu_);
  throw_if_departed(rank, op);
  arrive(lock, rank, op, /*check=*/false);
}

void Group::leave(int rank) {
  std::lock_guard lock(mu_);
  departed_.push_back(rank);
  cv_.notify_all();
}

Verdict Group::arrive(std::unique_lock<std::mutex>& lock, int rank, Op op, bool check) {
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

void Group::throw_if_departed(int rank, Op op) const {
  if (departed_.empty()) return;
  throw FailedPreconditionError(fmt::format(
      "in-process group of {} ranks: rank {} is in {} but rank{} [{}] left the group (its "
      "communicator was destroyed, e.g. its thread returned or threw); every rank must make "
      "the same collective calls",
      n_, rank, op_name(op), departed_.size() == 1 ? "" : "s", fmt::join(departed_, ", ")));
}

Verdict Group::check_posts() {
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

Verdict Group::check_exchange_boxes() const {
  for (int r = 0; r < n_; ++r) {
    for (const auto* regions : {&post(r).send_regions, &post(r).recv_regions}) {
      for (const BoxRegion& g : *regions) {
        if (g.peer < 0 || g.peer >= n_) {
          return {Verdict::Kind::kValue,
                  fmt::format("exchange_boxes: rank {} names peer {}; expected 0 to {}", r, g.peer,
                              n_ - 1)};
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
        return internal(
            fmt::format("exchange_boxes: rank {} sends {} regions to rank {}, which expects {}", r,
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

Verdict Group::check_all_to_all_v() const {
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
  return internal(fmt::format(
      "all_to_all_v: {}{}", first_mismatch,
      mismatches == 1 ? std::string() : fmt::format(" ({} mismatching pairs in all)", mismatches)));
}

Verdict Group::check_reduction(Op op) {
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
            fmt::format("{} does not support dtype {}; supported: F32, F64, I32, I64", op_name(op),
                        dtype_name(first.dtype))};
  }
  if (op == Op::kAllReduceSum) scratch_.resize(first.count * dtype_size(first.dtype));
  return {};
}

Verdict Group::internal(std::string message) {
  return {Verdict::Kind::kInternal, std::move(message)};
}

}  // namespace meshlayout::in_process_detail
