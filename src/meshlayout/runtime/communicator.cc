#include "meshlayout/runtime/communicator.h"

#include <fmt/format.h>

#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/box_ops.h"

namespace meshlayout {
namespace {

// NOTE [Failure agreement]
// agree_on_failure costs two collectives: an all_gather of a fixed-size header from every
// rank, then (only if some rank failed) a broadcast of the lowest failing rank's message.
// The header carries the error category, so every rank rethrows the same exception type with
// the same text, and no rank returns while another throws.
enum class FailureCategory : uint64_t {
  kNone = 0,
  kError = 1,  // plain meshlayout::Error, and the string_view overload
  kValue = 2,
  kNotFound = 3,
  kFailedPrecondition = 4,
  kDataLoss = 5,
  kInternal = 6,  // InternalError, or any exception that is not a meshlayout::Error
  kResourceExhausted = 7,
};

struct FailureHeader {
  uint64_t category = 0;
  uint64_t message_bytes = 0;
};
static_assert(sizeof(FailureHeader) == 16, "the header is exchanged as raw bytes");

struct LocalFailure {
  FailureCategory category = FailureCategory::kNone;
  std::string message;
};

LocalFailure classify(const std::exception_ptr& error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const ValueError& e) {
    return {FailureCategory::kValue, e.what()};
  } catch (const NotFoundError& e) {
    return {FailureCategory::kNotFound, e.what()};
  } catch (const FailedPreconditionError& e) {
    return {FailureCategory::kFailedPrecondition, e.what()};
  } catch (const DataLossError& e) {
    return {FailureCategory::kDataLoss, e.what()};
  } catch (const InternalError& e) {
    return {FailureCategory::kInternal, e.what()};
  } catch (const ResourceExhaustedError& e) {
    return {FailureCategory::kResourceExhausted, e.what()};
  } catch (const std::bad_alloc&) {
    return {FailureCategory::kResourceExhausted, "out of memory (std::bad_alloc)"};
  } catch (const Error& e) {
    return {FailureCategory::kError, e.what()};
  } catch (const std::exception& e) {
    return {FailureCategory::kInternal, e.what()};
  } catch (...) {
    return {FailureCategory::kInternal, "an exception not derived from std::exception"};
  }
}

[[noreturn]] void throw_agreed(uint64_t category, const std::string& message) {
  switch (static_cast<FailureCategory>(category)) {
    case FailureCategory::kError:
      throw Error(message);
    case FailureCategory::kValue:
      throw ValueError(message);
    case FailureCategory::kNotFound:
      throw NotFoundError(message);
    case FailureCategory::kFailedPrecondition:
      throw FailedPreconditionError(message);
    case FailureCategory::kDataLoss:
      throw DataLossError(message);
    case FailureCategory::kInternal:
      throw InternalError(message);
    case FailureCategory::kResourceExhausted:
      throw ResourceExhaustedError(message);
    case FailureCategory::kNone:
      break;
  }
  throw InternalError(
      fmt::format("agree_on_failure received unknown failure category {} (expected 1 to 7); "
                  "message: {}",
                  category, message));
}

void agree(Communicator& comm, const LocalFailure& local) {
  const int n = comm.size();
  FailureHeader mine{.category = static_cast<uint64_t>(local.category),
                     .message_bytes = local.message.size()};
  std::vector<FailureHeader> all(static_cast<size_t>(n));
  comm.all_gather(&mine, sizeof mine, all.data());

  int first = -1;
  std::vector<int> others;
  for (int r = 0; r < n; ++r) {
    if (all[static_cast<size_t>(r)].category == 0) continue;
    if (first < 0) {
      first = r;
    } else {
      others.push_back(r);
    }
  }
  if (first < 0) return;

  const FailureHeader& chosen = all[static_cast<size_t>(first)];
  std::string message(chosen.message_bytes, '\0');
  if (comm.rank() == first && !message.empty()) {
    std::memcpy(message.data(), local.message.data(), message.size());
  }
  if (!message.empty()) comm.broadcast(message.data(), message.size(), first);

  std::string text = fmt::format("rank {}: {}", first, message);
  if (!others.empty()) {
    text += fmt::format(" ({} more rank{} failed: [{}])", others.size(),
                        others.size() == 1 ? "" : "s", fmt::join(others, ", "));
  }
  throw_agreed(chosen.category, text);
}

// ---------------------------------------------------------------------------------------------
// A group of one rank: every collective is a local copy, with the same argument checks as the
// in-process group of one rank.

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "in-process"; }

  void barrier() override {}

  void all_gather(const void* send, size_t bytes, void* recv) override {
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
  }

  void all_to_all_v(const void* send, std::span<const size_t> send_counts,
                    std::span<const size_t> send_offsets, void* recv,
                    std::span<const size_t> recv_counts,
                    std::span<const size_t> recv_offsets) override {
    const size_t spans[] = {send_counts.size(), send_offsets.size(), recv_counts.size(),
                            recv_offsets.size()};
    for (size_t s : spans) {
      if (s != 1) {
        throw InternalError(fmt::format(
            "all_to_all_v on a single-process communicator: count and offset spans have "
            "[{}] entries; expected 1 each (one per rank)",
            fmt::join(spans, ", ")));
      }
    }
    if (send_counts[0] != recv_counts[0]) {
      throw InternalError(
          fmt::format("all_to_all_v: rank 0 sends {} bytes to rank 0 but rank 0 expects {} "
                      "bytes from rank 0",
                      send_counts[0], recv_counts[0]));
    }
    if (send_counts[0] == 0) return;
    std::memmove(static_cast<std::byte*>(recv) + recv_offsets[0],
                 static_cast<const std::byte*>(send) + send_offsets[0], send_counts[0]);
  }

  void all_reduce_sum(void*, size_t, DType dtype) override {
    check_reduce_dtype("all_reduce_sum", dtype);
  }

  void reduce_scatter_sum(const void* send, void* recv, size_t count, DType dtype) override {
    check_reduce_dtype("reduce_scatter_sum", dtype);
    if (count > 0 && send != recv) std::memmove(recv, send, count * dtype_size(dtype));
  }

  void broadcast(void*, size_t, int root) override {
    if (root != 0) {
      throw ValueError(
          fmt::format("broadcast root {} is out of range for a group of 1 rank; expected 0", root));
    }
  }

  void exchange_boxes(std::span<const BoxRegion> sends, std::span<const BoxRegion> recvs,
                      size_t element_size) override {
    if (sends.size() != recvs.size()) {
      throw InternalError(
          fmt::format("exchange_boxes: rank 0 sends {} regions to itself but receives {}",
                      sends.size(), recvs.size()));
    }
    for (size_t i = 0; i < sends.size(); ++i) copy_region(sends[i], recvs[i], element_size);
  }

 private:
  static void check_reduce_dtype(std::string_view op, DType dtype) {
    if (dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kI32 ||
        dtype == DType::kI64) {
      return;
    }
    throw ValueError(fmt::format("{} does not support dtype {}; supported: F32, F64, I32, I64", op,
                                 dtype_name(dtype)));
  }
};

}  // namespace

double sum_in_rank_order(Communicator& comm, double mine) {
  if (comm.size() == 1) return mine;
  std::vector<double> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, sizeof mine, all.data());
  double total = 0;
  for (double v : all) total += v;
  return total;
}

void agree_on_failure(Communicator& comm, std::string_view local_error) {
  LocalFailure local;
  if (!local_error.empty()) local = {FailureCategory::kError, std::string(local_error)};
  agree(comm, local);
}

void agree_on_failure(Communicator& comm, const std::exception_ptr& local_error) {
  agree(comm, classify(local_error));
}

std::vector<std::byte> Communicator::exchange_boxes_if_agreed(
    std::span<const std::byte> header, std::span<const BoxRegion> sends,
    std::span<const BoxRegion> recvs, size_t element_size, const std::function<void()>& meanwhile) {
  // Ranks that share memory wait little for each other: the work runs first, alone.
  if (meanwhile) meanwhile();
  const size_t h = header.size();
  std::vector<std::byte> all(h * static_cast<size_t>(size()));
  all_gather(header.data(), h, all.data());
  auto agrees = [&](int peer) {
    return h == 0 || std::memcmp(all.data() + static_cast<size_t>(peer) * h, header.data(), h) == 0;
  };
  std::vector<BoxRegion> s, r;
  for (const BoxRegion& g : sends)
    if (agrees(g.peer)) s.push_back(g);
  for (const BoxRegion& g : recvs)
    if (agrees(g.peer)) r.push_back(g);
  exchange_boxes(s, r, element_size);
  return all;
}

void copy_region(const BoxRegion& send, const BoxRegion& recv, size_t element_size) {
  if (send.piece.shape != recv.piece.shape) {
    throw InternalError(fmt::format(
        "exchange_boxes: a send of a piece of shape {} is matched with a receive of shape {}",
        shape_to_string(send.piece.shape), shape_to_string(recv.piece.shape)));
  }
  // Express the receive buffer in the sender's coordinates, then copy the sender's piece.
  Box shifted = recv.buffer_box;
  for (size_t d = 0; d < shifted.offset.size(); ++d) {
    shifted.offset[d] += send.piece.offset[d] - recv.piece.offset[d];
  }
  copy_box(send.base, send.buffer_box, recv.base, shifted, send.piece, element_size);
}

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace meshlayout
