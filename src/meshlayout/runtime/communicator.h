// communicator.h — the collectives meshlayout's distributed code needs, behind one interface
// with two implementations: InProcessCommunicator (N ranks as threads of one process, for
// tests and ThreadSanitizer) and MpiCommunicator (one rank per process, Open MPI; its own
// target under runtime/mpi/). One conformance suite runs against both.
//
// Every call is collective: all ranks of the group call it, in the same order, with
// arguments that agree (counts, roots). Buffers are raw bytes; reductions take a DType.
//
// Example:
//   std::vector<uint64_t> sizes(comm.size());
//   uint64_t mine = 42;
//   comm.all_gather(&mine, sizeof mine, sizes.data());   // sizes[r] = rank r's value
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {

/// A region of a row-major buffer for Communicator::exchange_boxes: the sub-box `piece` of a
/// buffer at `base` holding `buffer_box` (both in the same coordinates), exchanged with `peer`.
struct BoxRegion {
  int peer;
  std::byte* base;  // read for a send, written for a receive
  Box buffer_box;
  Box piece;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "in-process" or "mpi".
  virtual std::string_view backend() const = 0;

  virtual void barrier() = 0;

  /// Every rank contributes `bytes` bytes; `recv` receives size() × bytes, rank order.
  virtual void all_gather(const void* send, size_t bytes, void* recv) = 0;

  /// Rank r sends send_counts[k] bytes at send + send_offsets[k] to rank k, and receives
  /// recv_counts[k] bytes from rank k at recv + recv_offsets[k]. All spans have size() entries;
  /// counts must agree pairwise (what r sends to k is what k expects from r).
  virtual void all_to_all_v(const void* send, std::span<const size_t> send_counts,
                            std::span<const size_t> send_offsets, void* recv,
                            std::span<const size_t> recv_counts,
                            std::span<const size_t> recv_offsets) = 0;

  /// Element-wise sum of `count` elements of `dtype` across ranks, in place, on every rank.
  /// Floating dtypes F32/F64 and integer dtypes I32/I64 are supported.
  virtual void all_reduce_sum(void* data, size_t count, DType dtype) = 0;

  /// Sums `send` (size() × `count` elements) across ranks; rank r receives block r
  /// (`count` elements) of the sum in `recv`. Same dtypes as all_reduce_sum.
  virtual void reduce_scatter_sum(const void* send, void* recv, size_t count, DType dtype) = 0;

  /// Copies `bytes` bytes from `root`'s `data` to every rank's `data`.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;

  /// Point-to-point exchange of sub-boxes of row-major buffers, collective over the group.
  /// For every pair of ranks (r, k), the i-th region r sends to k is the i-th region k
  /// receives from r, and both pieces have the same shape. Data goes straight from the
  /// sender's buffer into the receiver's: meshlayout stages nothing (MPI: one message per
  /// piece described by a subarray datatype, so contiguous pieces move with one copy).
  virtual void exchange_boxes(std::span<const BoxRegion> sends, std::span<const BoxRegion> recvs,
                              size_t element_size) = 0;

  /// exchange_boxes fused with an all_gather of `header` (the same size on every rank):
  /// returns every rank's header in rank order, and moves the regions of a pair of ranks only
  /// if their headers are equal byte for byte (the test is symmetric, so both sides skip the
  /// same pairs). Regions with a peer whose header differs are left untouched.
  /// Why: a caller that must agree before moving data (agree_on_operation) would otherwise
  /// wait for the slowest rank before any transfer starts; here the transfers of a pair start
  /// as soon as both have arrived (MPI: headers are point-to-point messages, each pair's
  /// regions are posted when its header arrives). The default implementation all-gathers
  /// first, then exchanges.
  /// `meanwhile`, if set, runs on the calling thread once this rank's header and the regions
  /// of the pairs already agreed on are posted, before waiting for the rest: work that needs
  /// no other rank (a reshard's copies inside the process) hides the wait for the slowest
  /// rank. An exception from it is rethrown after the exchange completes.
  /// Example: std::vector<std::byte> all = comm.exchange_boxes_if_agreed(
  ///              std::as_bytes(std::span(&record, 1)), sends, recvs, 4, nullptr);
  virtual std::vector<std::byte> exchange_boxes_if_agreed(std::span<const std::byte> header,
                                                          std::span<const BoxRegion> sends,
                                                          std::span<const BoxRegion> recvs,
                                                          size_t element_size,
                                                          const std::function<void()>& meanwhile);
};

/// Agreement on a local failure (DESIGN §4): every rank calls this at the same point with the
/// error it hit, if any (empty = none). If any rank failed, every rank throws the same
/// meshlayout::Error built from the lowest failing rank's message, prefixed with
/// "rank <r>: "; otherwise it returns. No rank is left waiting in a later collective.
void agree_on_failure(Communicator& comm, std::string_view local_error);

/// The same agreement for a caught exception (null = no failure); the error every rank throws
/// keeps its category: ValueError, NotFoundError, FailedPreconditionError, DataLossError,
/// ResourceExhaustedError (also for std::bad_alloc), InternalError or plain meshlayout::Error. Any
/// other exception counts as an InternalError. Example: std::exception_ptr err; try {
/// write_shard(); } catch (...) {
///            err = std::current_exception(); }
///          agree_on_failure(comm, err);   // every rank throws, or none does
void agree_on_failure(Communicator& comm, const std::exception_ptr& local_error);

/// Copies `send.piece` of the send buffer into `recv.piece` of the receive buffer (pieces of
/// the same shape). InternalError naming both shapes if they differ. Used by the backends
/// whose ranks share memory.
void copy_region(const BoxRegion& send, const BoxRegion& recv, size_t element_size);

/// Every rank's `mine` added in rank order, so each rank gets the same double (a sum of
/// per-process partial losses, for instance). Collective; one rank: `mine` itself.
double sum_in_rank_order(Communicator& comm, double mine);

/// A communicator of one rank (size 1), used when a program runs in a single process.
std::unique_ptr<Communicator> make_single_process_communicator();

/// `n` communicators forming one group, one per thread: rank i is element i. Calls block
/// until every rank of the group has made the matching call.
std::vector<std::unique_ptr<Communicator>> make_in_process_group(int n);

}  // namespace meshlayout
