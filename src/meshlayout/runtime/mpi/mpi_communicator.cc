#include "meshlayout/runtime/mpi/mpi_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/mpi/collective_timeout.h"

namespace meshlayout {
namespace {

// NOTE [Large MPI transfers]
// MPI counts and displacements are int; meshlayout's are size_t. Each collective has a direct
// path, used when every count it hands to MPI fits in options.max_count (INT_MAX by default),
// and a split path otherwise. The choice must be the same on every rank, so it depends only
// on values all ranks share (bytes, count, size) — except for all_to_all_v, whose counts and
// offsets are per rank: there the ranks agree with one MPI_Allreduce of a flag first.
//   all_gather         direct: MPI_Allgather if size × bytes fits. Split: one broadcast per
//                      rank of its own block, each cut into pieces of at most max_count bytes.
//   all_to_all_v       direct: MPI_Alltoallv (MPI_BYTE) if all counts and offsets fit. Split:
//                      point-to-point, every message cut into pieces of at most max_count
//                      bytes (MPI_Irecv / MPI_Isend, one tag; MPI keeps pieces in order), then
//                      MPI_Waitall. Offsets are applied to the pointers, so they can be any
//                      size_t.
//   all_reduce_sum     MPI_Allreduce (in place) on pieces of at most max_count elements.
//   reduce_scatter_sum direct: MPI_Reduce_scatter_block if size × count fits. Split: pieces
//                      of m elements of every block are packed into a staging buffer (at most
//                      kStagingBytes) and reduce-scattered, m × size <= max_count.
//   broadcast          MPI_Bcast on pieces of at most max_count bytes.
constexpr size_t kStagingBytes = size_t{256} << 20;
constexpr int kAllToAllTag = 0x6d6c;  // any tag: the duplicated communicator is ours alone

MPI_Datatype mpi_type(DType dtype, std::string_view op) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    default:
      throw ValueError(fmt::format("{} does not support dtype {}; supported: F32, F64, I32, I64",
                                   op, dtype_name(dtype)));
  }
}

std::string spans_problem(int size, std::span<const size_t> send_counts,
                          std::span<const size_t> send_offsets, std::span<const size_t> recv_counts,
                          std::span<const size_t> recv_offsets) {
  const std::pair<std::string_view, size_t> spans[] = {{"send_counts", send_counts.size()},
                                                       {"send_offsets", send_offsets.size()},
                                                       {"recv_counts", recv_counts.size()},
                                                       {"recv_offsets", recv_offsets.size()}};
  for (const auto& [name, entries] : spans) {
    if (entries != static_cast<size_t>(size)) {
      return fmt::format("all_to_all_v: {} has {} entries; expected {} (one per rank)", name,
                         entries, size);
    }
  }
  return "";
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const MpiCommunicatorOptions& options)
    : options_(options) {
  if (options.max_count < 1 || options.max_count > static_cast<size_t>(INT_MAX)) {
    throw ValueError(fmt::format("MpiCommunicatorOptions.max_count must be in [1, {}], got {}",
                                 INT_MAX, options.max_count));
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw FailedPreconditionError(fmt::format(
        "MpiCommunicator needs an initialized MPI, but MPI {}; call initialize_mpi() first",
        finalized ? "was finalized already" : "is not initialized"));
  }
  check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int code, const char* call) const {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) length = 0;
  throw InternalError(fmt::format("{} failed on rank {} of {}: {} (MPI error code {})", call, rank_,
                                  size_,
                                  length > 0 ? std::string_view(text, static_cast<size_t>(length))
                                             : std::string_view("unknown MPI error"),
                                  code));
}

void MpiCommunicator::barrier() {
  CollectiveDeadline deadline("MPI_Barrier");
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

void MpiCommunicator::all_gather(const void* send, size_t bytes, void* recv) {
  CollectiveDeadline deadline("all_gather (MPI_Allgather)");
  auto* out = static_cast<std::byte*>(recv);
  std::byte* mine = out + static_cast<size_t>(rank_) * bytes;
  const bool in_place = send == mine;
  if (bytes <= options_.max_count / static_cast<size_t>(size_)) {
    const int n = static_cast<int>(bytes);
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_),
          "MPI_Allgather");
    return;
  }
  // Split path: every rank broadcasts its own block (NOTE [Large MPI transfers]).
  if (!in_place) std::memcpy(mine, send, bytes);
  for (int root = 0; root < size_; ++root) {
    std::byte* block = out + static_cast<size_t>(root) * bytes;
    for (size_t at = 0; at < bytes; at += options_.max_count) {
      const int n = static_cast<int>(std::min(options_.max_count, bytes - at));
      check(MPI_Bcast(block + at, n, MPI_BYTE, root, comm_), "MPI_Bcast (all_gather)");
    }
  }
}

void MpiCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_counts,
                                   std::span<const size_t> send_offsets, void* recv,
                                   std::span<const size_t> recv_counts,
                                   std::span<const size_t> recv_offsets) {
  CollectiveDeadline deadline("all_to_all_v (MPI_Alltoallv)");
  const auto n = static_cast<size_t>(size_);
  const auto me = static_cast<size_t>(rank_);
  // Problems found here are agreed on (agree_on_failure) rather than thrown on one rank.
  std::string problem = spans_problem(size_, send_counts, send_offsets, recv_counts, recv_offsets);
  if (problem.empty() && send_counts[me] != recv_counts[me]) {
    problem = fmt::format("all_to_all_v: rank {} sends {} bytes to itself but expects {}", rank_,
                          send_counts[me], recv_counts[me]);
  }
  if (options_.check_counts) {
    std::vector<uint64_t> sending(n, 0), incoming(n, 0);
    if (problem.empty()) std::copy(send_counts.begin(), send_counts.end(), sending.begin());
    check(MPI_Alltoall(sending.data(), 1, MPI_UINT64_T, incoming.data(), 1, MPI_UINT64_T, comm_),
          "MPI_Alltoall (all_to_all_v count check)");
    for (size_t k = 0; k < n && problem.empty(); ++k) {
      if (incoming[k] == recv_counts[k]) continue;
      problem = fmt::format(
          "all_to_all_v: rank {} sends {} bytes to rank {} but rank {} expects "
          "{} bytes from rank {}",
          k, incoming[k], rank_, rank_, recv_counts[k], k);
    }
  }
  int split = 0;
  if (problem.empty()) {
    for (size_t k = 0; k < n; ++k) {
      const size_t values[] = {send_counts[k], send_offsets[k], recv_counts[k], recv_offsets[k]};
      for (size_t v : values) split |= v > options_.max_count ? 1 : 0;
    }
  }
  int flags[2] = {problem.empty() ? 0 : 1, split};
  check(MPI_Allreduce(MPI_IN_PLACE, flags, 2, MPI_INT, MPI_MAX, comm_),
        "MPI_Allreduce (all_to_all_v path agreement)");
  if (flags[0] != 0) {
    agree_on_failure(*this,
                     problem.empty() ? nullptr : std::make_exception_ptr(InternalError(problem)));
    throw InternalError("all_to_all_v: a rank reported a problem that agree_on_failure lost");
  }
  if (flags[1] != 0) {
    all_to_all_v_split(static_cast<const std::byte*>(send), send_counts, send_offsets,
                       static_cast<std::byte*>(recv), recv_counts, recv_offsets);
    return;
  }
  std::vector<int> sc(n), so(n), rc(n), ro(n);
  for (size_t k = 0; k < n; ++k) {
    sc[k] = static_cast<int>(send_counts[k]);
    so[k] = static_cast<int>(send_offsets[k]);
    rc[k] = static_cast<int>(recv_counts[k]);
    ro[k] = static_cast<int>(recv_offsets[k]);
  }
  check(MPI_Alltoallv(send, sc.data(), so.data(), MPI_BYTE, recv, rc.data(), ro.data(), MPI_BYTE,
                      comm_),
        "MPI_Alltoallv");
}

void MpiCommunicator::all_to_all_v_split(const std::byte* send, std::span<const size_t> send_counts,
                                         std::span<const size_t> send_offsets, std::byte* recv,
                                         std::span<const size_t> recv_counts,
                                         std::span<const size_t> recv_offsets) {
  const size_t piece = options_.max_count;
  std::vector<MPI_Request> requests;
  auto post = [&](bool receive, int peer, size_t offset, size_t count) {
    for (size_t at = 0; at < count; at += piece) {
      const int n = static_cast<int>(std::min(piece, count - at));
      MPI_Request& request = requests.emplace_back(MPI_REQUEST_NULL);
      if (receive) {
        check(MPI_Irecv(recv + offset + at, n, MPI_BYTE, peer, kAllToAllTag, comm_, &request),
              "MPI_Irecv (all_to_all_v)");
      } else {
        check(MPI_Isend(send + offset + at, n, MPI_BYTE, peer, kAllToAllTag, comm_, &request),
              "MPI_Isend (all_to_all_v)");
      }
    }
  };
  for (int k = 0; k < size_; ++k) {
    if (k != rank_)
      post(true, k, recv_offsets[static_cast<size_t>(k)], recv_counts[static_cast<size_t>(k)]);
  }
  for (int k = 0; k < size_; ++k) {
    if (k != rank_)
      post(false, k, send_offsets[static_cast<size_t>(k)], send_counts[static_cast<size_t>(k)]);
  }
  const auto me = static_cast<size_t>(rank_);
  if (send_counts[me] > 0) {
    std::memcpy(recv + recv_offsets[me], send + send_offsets[me], send_counts[me]);
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall (all_to_all_v)");
}

void MpiCommunicator::all_reduce_sum(void* data, size_t count, DType dtype) {
  CollectiveDeadline deadline("all_reduce_sum (MPI_Allreduce)");
  const MPI_Datatype type = mpi_type(dtype, "all_reduce_sum");
  const size_t esize = dtype_size(dtype);
  auto* p = static_cast<std::byte*>(data);
  for (size_t at = 0; at < count; at += options_.max_count) {
    const int n = static_cast<int>(std::min(options_.max_count, count - at));
    check(MPI_Allreduce(MPI_IN_PLACE, p + at * esize, n, type, MPI_SUM, comm_), "MPI_Allreduce");
  }
}

void MpiCommunicator::reduce_scatter_sum(const void* send, void* recv, size_t count, DType dtype) {
  CollectiveDeadline deadline("reduce_scatter_sum (MPI_Reduce_scatter)");
  const MPI_Datatype type = mpi_type(dtype, "reduce_scatter_sum");
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(size_);
  if (count <= options_.max_count / n) {
    check(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), type, MPI_SUM, comm_),
          "MPI_Reduce_scatter_block");
    return;
  }
  // Split path (NOTE [Large MPI transfers]): pack piece j of every block, reduce-scatter it.
  const size_t piece =
      std::max<size_t>(1, std::min(options_.max_count / n, kStagingBytes / (n * esize)));
  std::vector<std::byte> staging(n * piece * esize);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  for (size_t at = 0; at < count; at += piece) {
    const size_t m = std::min(piece, count - at);
    for (size_t k = 0; k < n; ++k) {
      std::memcpy(staging.data() + k * m * esize, in + (k * count + at) * esize, m * esize);
    }
    check(MPI_Reduce_scatter_block(staging.data(), out + at * esize, static_cast<int>(m), type,
                                   MPI_SUM, comm_),
          "MPI_Reduce_scatter_block");
  }
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  CollectiveDeadline deadline("broadcast (MPI_Bcast)");
  if (root < 0 || root >= size_) {
    throw ValueError(
        fmt::format("broadcast root {} is out of range for a group of {} rank{}; expected 0 to {}",
                    root, size_, size_ == 1 ? "" : "s", size_ - 1));
  }
  auto* p = static_cast<std::byte*>(data);
  for (size_t at = 0; at < bytes; at += options_.max_count) {
    const int n = static_cast<int>(std::min(options_.max_count, bytes - at));
    check(MPI_Bcast(p + at, n, MPI_BYTE, root, comm_), "MPI_Bcast");
  }
}

}  // namespace meshlayout
