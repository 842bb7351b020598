// mpi_exchange.cc — MpiCommunicator::exchange_boxes and exchange_boxes_if_agreed: sub-boxes
// of row-major buffers moved point-to-point, each described by an MPI subarray datatype (or
// plain bytes when the piece is one contiguous run), so meshlayout packs nothing.
//
// NOTE [Datatypes, not staging]: staging was measured and lost. Packing each non-contiguous
// piece into a contiguous buffer (reused between calls, packed on the calling thread and sent
// as soon as packed, so Open MPI moves it with one CMA copy) and receiving non-contiguous
// pieces into one and unpacking: mpi_reshard_bench -np 4, 2 shared cores, two runs each,
// ratio to raw MPI_Alltoallv (higher is better) staged vs datatypes: rows->columns 64M
// 0.58/0.65 vs 1.01/1.05, 256M 0.47/0.44 vs 1.10/1.23, uneven 0.45/0.61 vs 0.97/1.57.
// (A standalone microbenchmark with two busy loops beside the ranks favoured contiguous
// messages, 2-47 ms against 44-268 ms; in the reshard the packing delays the sends more.)
//
// NOTE [Single copy through CMA, measured, not built]: each sender process_vm_writev'ing its
// strided piece straight into the receiver's buffer (addresses exchanged first, then a barrier;
// bench/mpi_cma_probe.cc, issue 15) against these datatypes, rows->columns 64M, best ratio to
// raw MPI_Alltoallv over 4 runs at load average 2.6-3.5: np 4 CMA 0.77-1.46 vs datatypes
// 0.77-1.03 (CPU 0.99-1.22x raw vs 0.94-1.39x); np 2 both 0.31-0.35 (raw moves contiguous
// buffers: 2.6-2.9 ms vs 8.2-8.7 ms). No consistent gain for the protocol it needs (address
// messages per pair, a completion message, a fallback when CMA is refused).
//
// NOTE [Exchange order]: receives are posted before sends, so large messages find their
// buffers posted, and peers are taken in rotated order (send to rank+1, rank+2, ...; receive
// from rank-1, rank-2, ...) so that no rank is every rank's first partner; the regions of one
// pair keep their order, which is how the two sides pair them (one tag per kind of message).
//
// NOTE [Agreed exchange]: exchange_boxes_if_agreed sends this rank's header to every other
// rank and receives theirs (point-to-point, tag kHeaderTag); as each header arrives
// (MPI_Waitsome), the regions of that pair are posted if the header equals this rank's. A pair
// of ranks that arrive early moves its data while a late rank is still on its way, as a raw
// MPI_Alltoallv would; agreeing with an all_gather first made every pair wait for the last
// rank (measured under mpirun -np 4 on 2 shared cores: ranks leave a barrier up to 1-2 ms
// apart, 20-30% of a 64 MiB reshard).
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <functional>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/mpi/collective_timeout.h"
#include "meshlayout/runtime/mpi/mpi_communicator.h"

namespace meshlayout {
namespace {

constexpr int kExchangeTag = 0x4d4c;  // "ML"
constexpr int kHeaderTag = 0x4d48;    // "MH"

// A datatype for `piece` of a row-major buffer holding `buffer_box`; `count` of it move from
// `start`. Contiguous pieces are plain bytes (no derived type).
struct RegionType {
  MPI_Datatype type = MPI_BYTE;
  int count = 0;
  std::byte* start = nullptr;
  bool derived = false;
};

// Posts regions and owns their requests and derived datatypes.
class Poster {
 public:
  Poster(MPI_Comm comm, size_t element_size, const std::function<void(int, const char*)>& check)
      : comm_(comm), element_size_(element_size), check_(check) {}
  ~Poster() {
    for (RegionType& t : types_) {
      if (t.derived) MPI_Type_free(&t.type);
    }
  }
  Poster(const Poster&) = delete;
  Poster& operator=(const Poster&) = delete;

  void post(const BoxRegion& g, bool receive) {
    if (g.piece.num_elements() == 0) return;
    types_.push_back(describe(g));
    const RegionType& t = types_.back();
    requests_.emplace_back(MPI_REQUEST_NULL);
    if (receive) {
      check_(MPI_Irecv(t.start, t.count, t.type, g.peer, kExchangeTag, comm_, &requests_.back()),
             "MPI_Irecv (exchange_boxes)");
    } else {
      check_(MPI_Isend(t.start, t.count, t.type, g.peer, kExchangeTag, comm_, &requests_.back()),
             "MPI_Isend (exchange_boxes)");
    }
  }
  std::vector<MPI_Request>& requests() { return requests_; }

 private:
  RegionType describe(const BoxRegion& g) {
    const size_t rank = g.piece.shape.size();
    RegionType t;
    const int64_t bytes = g.piece.num_elements() * static_cast<int64_t>(element_size_);
    if (bytes > INT_MAX) {
      throw InternalError(fmt::format(
          "exchange_boxes: a piece of {} bytes exceeds MPI's int count; split it first", bytes));
    }
    // Contiguous if every dim after the first non-1 extent spans the whole buffer.
    size_t first = 0;
    while (first < rank && g.piece.shape[first] == 1) ++first;
    bool contiguous = true;
    for (size_t d = first + 1; d < rank; ++d) {
      contiguous = contiguous && g.piece.shape[d] == g.buffer_box.shape[d];
    }
    int64_t offset = 0;  // element offset of the piece's first element
    for (size_t d = 0; d < rank; ++d) {
      offset = offset * g.buffer_box.shape[d] + (g.piece.offset[d] - g.buffer_box.offset[d]);
    }
    if (contiguous) {
      t.count = static_cast<int>(bytes);
      t.start = g.base + offset * static_cast<int64_t>(element_size_);
      return t;
    }
    std::vector<int> sizes(rank), subsizes(rank), starts(rank);
    for (size_t d = 0; d < rank; ++d) {
      if (g.buffer_box.shape[d] > INT_MAX) {
        throw InternalError(
            fmt::format("exchange_boxes: extent {} exceeds MPI's int", g.buffer_box.shape[d]));
      }
      sizes[d] = static_cast<int>(g.buffer_box.shape[d]);
      subsizes[d] = static_cast<int>(g.piece.shape[d]);
      starts[d] = static_cast<int>(g.piece.offset[d] - g.buffer_box.offset[d]);
    }
    MPI_Datatype element;
    check_(MPI_Type_contiguous(static_cast<int>(element_size_), MPI_BYTE, &element),
           "MPI_Type_contiguous");
    const int created =
        MPI_Type_create_subarray(static_cast<int>(rank), sizes.data(), subsizes.data(),
                                 starts.data(), MPI_ORDER_C, element, &t.type);
    MPI_Type_free(&element);
    check_(created, "MPI_Type_create_subarray");
    t.derived = true;  // freed by the destructor from here on
    check_(MPI_Type_commit(&t.type), "MPI_Type_commit");
    t.count = 1;
    t.start = g.base;
    return t;
  }

  MPI_Comm comm_;
  size_t element_size_;
  const std::function<void(int, const char*)>& check_;
  std::vector<RegionType> types_;
  std::vector<MPI_Request> requests_;
};

// The regions of `regions` exchanged with each peer, in their order.
std::vector<std::vector<const BoxRegion*>> by_peer(std::span<const BoxRegion> regions, int size) {
  std::vector<std::vector<const BoxRegion*>> out(static_cast<size_t>(size));
  for (const BoxRegion& g : regions) {
    if (g.peer < 0 || g.peer >= size) {
      throw InternalError(
          fmt::format("exchange_boxes: peer {} is out of range for a group of {}", g.peer, size));
    }
    out[static_cast<size_t>(g.peer)].push_back(&g);
  }
  return out;
}

}  // namespace

void MpiCommunicator::exchange_boxes(std::span<const BoxRegion> sends,
                                     std::span<const BoxRegion> recvs, size_t element_size) {
  CollectiveDeadline deadline("exchange_boxes (MPI point-to-point)");
  const std::function<void(int, const char*)> check_fn = [this](int code, const char* call) {
    check(code, call);
  };
  Poster poster(comm_, element_size, check_fn);
  const auto to = by_peer(sends, size_), from = by_peer(recvs, size_);
  for (int i = 0; i < size_; ++i) {  // NOTE [Exchange order]
    for (const BoxRegion* g : from[static_cast<size_t>((rank_ - i + size_) % size_)]) {
      poster.post(*g, true);
    }
  }
  for (int i = 0; i < size_; ++i) {
    for (const BoxRegion* g : to[static_cast<size_t>((rank_ + i) % size_)]) poster.post(*g, false);
  }
  std::vector<MPI_Request>& requests = poster.requests();
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall (exchange_boxes)");
}

std::vector<std::byte> MpiCommunicator::exchange_boxes_if_agreed(
    std::span<const std::byte> header, std::span<const BoxRegion> sends,
    std::span<const BoxRegion> recvs, size_t element_size, const std::function<void()>& meanwhile) {
  CollectiveDeadline deadline("exchange_boxes_if_agreed (MPI point-to-point)");
  const size_t h = header.size();
  if (h > static_cast<size_t>(INT_MAX)) {
    throw InternalError(fmt::format("exchange_boxes_if_agreed: a header of {} bytes", h));
  }
  const auto n = static_cast<size_t>(size_);
  std::vector<std::byte> all(h * n);
  if (h > 0) std::memcpy(all.data() + static_cast<size_t>(rank_) * h, header.data(), h);
  const std::function<void(int, const char*)> check_fn = [this](int code, const char* call) {
    check(code, call);
  };
  Poster poster(comm_, element_size, check_fn);
  const auto to = by_peer(sends, size_), from = by_peer(recvs, size_);
  auto post_pair = [&](int peer) {
    for (const BoxRegion* g : from[static_cast<size_t>(peer)]) poster.post(*g, true);
    for (const BoxRegion* g : to[static_cast<size_t>(peer)]) poster.post(*g, false);
  };
  post_pair(rank_);  // this rank's regions with itself, if any
  // Headers: receive from rank-1, rank-2, ...; send to rank+1, rank+2, ... (NOTE [Agreed
  // exchange]). header_requests[i] receives from peers[i].
  std::vector<int> peers;
  std::vector<MPI_Request> header_requests, header_sends;
  for (int i = 1; i < size_; ++i) {
    const int peer = (rank_ - i + size_) % size_;
    peers.push_back(peer);
    check(MPI_Irecv(all.data() + static_cast<size_t>(peer) * h, static_cast<int>(h), MPI_BYTE, peer,
                    kHeaderTag, comm_, &header_requests.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Irecv (exchange_boxes_if_agreed header)");
  }
  for (int i = 1; i < size_; ++i) {
    check(MPI_Isend(header.data(), static_cast<int>(h), MPI_BYTE, (rank_ + i) % size_, kHeaderTag,
                    comm_, &header_sends.emplace_back(MPI_REQUEST_NULL)),
          "MPI_Isend (exchange_boxes_if_agreed header)");
  }
  // Headers that arrived already: their pairs' regions go out before `meanwhile` runs.
  std::vector<int> done(header_requests.size());
  size_t left = header_requests.size();
  auto handle = [&](int count) {
    for (int c = 0; c < count; ++c) {
      const int peer = peers[static_cast<size_t>(done[static_cast<size_t>(c)])];
      if (h == 0 ||
          std::memcmp(all.data() + static_cast<size_t>(peer) * h, header.data(), h) == 0) {
        post_pair(peer);
      }
    }
    left -= static_cast<size_t>(count);
  };
  std::exception_ptr meanwhile_error;
  if (meanwhile) {
    if (left > 0) {
      int count = 0;
      check(MPI_Testsome(static_cast<int>(header_requests.size()), header_requests.data(), &count,
                         done.data(), MPI_STATUSES_IGNORE),
            "MPI_Testsome (exchange_boxes_if_agreed header)");
      if (count != MPI_UNDEFINED) handle(count);
    }
    try {
      meanwhile();
    } catch (...) {
      meanwhile_error = std::current_exception();  // rethrown once the exchange completes
    }
  }
  while (left > 0) {
    int count = 0;
    check(MPI_Waitsome(static_cast<int>(header_requests.size()), header_requests.data(), &count,
                       done.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitsome (exchange_boxes_if_agreed header)");
    handle(count);
  }
  std::vector<MPI_Request>& requests = poster.requests();
  requests.insert(requests.end(), header_sends.begin(), header_sends.end());
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall (exchange_boxes_if_agreed)");
  if (meanwhile_error) std::rethrow_exception(meanwhile_error);
  return all;
}

}  // namespace meshlayout
