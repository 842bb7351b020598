// mpi_communicator.h — the Communicator of one MPI process (target meshlayout_mpi).
//
// Wraps a duplicate of an MPI communicator (MPI_COMM_WORLD by default), so meshlayout's
// messages never mix with the program's own, with MPI_ERRORS_RETURN on it: every MPI error
// becomes an InternalError carrying MPI_Error_string. Byte counts are size_t: transfers
// beyond MPI's int counts are split as NOTE [Large MPI transfers] in the .cc describes.
// initialize_mpi() (mpi_runtime.h) builds the world communicator; build others directly.
//
// Example:
//   MpiCommunicator comm;                        // collective over MPI_COMM_WORLD
//   double partial[4] = {...};
//   comm.all_reduce_sum(partial, 4, DType::kF64);
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>

#include "meshlayout/runtime/communicator.h"

namespace meshlayout {

struct MpiCommunicatorOptions {
  /// The largest count handed to one MPI call (and, for all_gather / reduce_scatter_sum, the
  /// largest total over ranks); larger transfers take the split path. Tests lower it to run
  /// that path on small buffers.
  size_t max_count = INT_MAX;
  /// all_to_all_v first exchanges the send counts and checks them against recv_counts, and
  /// every rank throws the same InternalError naming the first mismatch (one MPI_Alltoall
  /// more per call). Off by default: mismatched counts are a caller bug that MPI reports as
  /// a truncation error, or not at all.
  bool check_counts = false;
};

class MpiCommunicator final : public Communicator {
 public:
  /// Collective over `comm`: duplicates it. FailedPreconditionError if MPI is not initialized.
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD, const MpiCommunicatorOptions& = {});
  /// Frees the duplicate, unless MPI was finalized already.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }
  /// The duplicated communicator meshlayout's collectives run on.
  MPI_Comm comm() const { return comm_; }

  void barrier() override;
  void all_gather(const void* send, size_t bytes, void* recv) override;
  void all_to_all_v(const void* send, std::span<const size_t> send_counts,
                    std::span<const size_t> send_offsets, void* recv,
                    std::span<const size_t> recv_counts,
                    std::span<const size_t> recv_offsets) override;
  void all_reduce_sum(void* data, size_t count, DType dtype) override;
  void reduce_scatter_sum(const void* send, void* recv, size_t count, DType dtype) override;
  void broadcast(void* data, size_t bytes, int root) override;
  /// One MPI_Isend / MPI_Irecv per region (tag kExchangeTag, matched in posting order per
  /// pair), each described by a subarray datatype (or plain bytes when the piece is one
  /// contiguous run), then MPI_Waitall. Pieces must stay under 2^31 elements and bytes.
  /// In mpi_exchange.cc, with its NOTEs on the order of posting.
  void exchange_boxes(std::span<const BoxRegion> sends, std::span<const BoxRegion> recvs,
                      size_t element_size) override;
  /// Headers go point-to-point; a pair's regions are posted as soon as its header arrives and
  /// matches (NOTE [Agreed exchange] in mpi_exchange.cc).
  std::vector<std::byte> exchange_boxes_if_agreed(std::span<const std::byte> header,
                                                  std::span<const BoxRegion> sends,
                                                  std::span<const BoxRegion> recvs,
                                                  size_t element_size,
                                                  const std::function<void()>& meanwhile) override;

 private:
  /// InternalError naming `call`, this rank and MPI's message unless `code` is MPI_SUCCESS.
  void check(int code, const char* call) const;
  void all_to_all_v_split(const std::byte* send, std::span<const size_t> send_counts,
                          std::span<const size_t> send_offsets, std::byte* recv,
                          std::span<const size_t> recv_counts,
                          std::span<const size_t> recv_offsets);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  MpiCommunicatorOptions options_;
};

}  // namespace meshlayout
