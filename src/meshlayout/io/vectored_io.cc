#include "meshlayout/io/vectored_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/thread_pool.h"

namespace meshlayout {
namespace {

struct Request {
  int fd;
  uint64_t offset;
  size_t first_piece;  // pieces [first_piece, first_piece + count), the first cut at `skip`
  size_t count;
  size_t skip;  // bytes of the first piece already covered by an earlier request
  uint64_t bytes;
};

// Moves one request, resuming short transfers.
void run_request(const Request& r, const std::vector<IoPiece>& pieces, IoDirection direction) {
  std::vector<iovec> iov(r.count);
  uint64_t left = r.bytes;
  for (size_t i = 0; i < r.count; ++i) {
    const IoPiece& p = pieces[r.first_piece + i];
    const size_t skip = i == 0 ? r.skip : 0;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(p.bytes - skip, left));
    iov[i] = iovec{p.memory + skip, n};
    left -= n;
  }
  size_t at = 0;  // first iovec not yet done
  uint64_t offset = r.offset;
  while (at < iov.size()) {
    const int n_iov = static_cast<int>(std::min<size_t>(iov.size() - at, IOV_MAX));
    const ssize_t n = direction == IoDirection::kRead
                          ? ::preadv(r.fd, iov.data() + at, n_iov, static_cast<off_t>(offset))
                          : ::pwritev(r.fd, iov.data() + at, n_iov, static_cast<off_t>(offset));
    // The piece being transferred, for messages.
    const IoPiece& piece = pieces[r.first_piece + at];
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("'{}': {} tensor '{}' at file byte {} failed: {}", piece.file,
                              direction == IoDirection::kRead ? "reading" : "writing", piece.what,
                              offset, std::strerror(errno)));
    }
    if (n == 0) {
      throw DataLossError(
          fmt::format("'{}': the file ends at byte {}, inside tensor '{}' "
                      "(truncated file?)",
                      piece.file, offset, piece.what));
    }
    offset += static_cast<uint64_t>(n);
    size_t done = static_cast<size_t>(n);
    while (at < iov.size() && done >= iov[at].iov_len) {
      done -= iov[at].iov_len;
      ++at;
    }
    if (at < iov.size()) {
      iov[at].iov_base = static_cast<std::byte*>(iov[at].iov_base) + done;
      iov[at].iov_len -= done;
    }
  }
}

}  // namespace

uint64_t run_vectored_io(std::vector<IoPiece>& pieces, IoDirection direction,
                         const VectoredIoOptions& options) {
  std::erase_if(pieces, [](const IoPiece& p) { return p.bytes == 0; });
  // In place (a stable sort would allocate a copy of the list); pieces never share an offset
  // except in a caller's bug, and then the memory address orders them.
  std::sort(pieces.begin(), pieces.end(), [](const IoPiece& a, const IoPiece& b) {
    if (a.fd != b.fd) return a.fd < b.fd;
    return a.offset != b.offset ? a.offset < b.offset : a.memory < b.memory;
  });
  const uint64_t max_bytes = std::max<uint64_t>(options.max_request_bytes, 1);
  std::vector<Request> requests;
  uint64_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const IoPiece& p = pieces[i];
    total += p.bytes;
    size_t skip = 0;
    // Extend the open request when this piece continues it in the file.
    if (!requests.empty()) {
      Request& r = requests.back();
      if (r.fd == p.fd && r.offset + r.bytes == p.offset && r.bytes < max_bytes &&
          r.count < static_cast<size_t>(IOV_MAX)) {
        const uint64_t take = std::min<uint64_t>(p.bytes, max_bytes - r.bytes);
        r.count += 1;
        r.bytes += take;
        skip = static_cast<size_t>(take);
      }
    }
    // Start requests for what is left of the piece.
    while (skip < p.bytes) {
      const uint64_t take = std::min<uint64_t>(p.bytes - skip, max_bytes);
      requests.push_back(Request{p.fd, p.offset + skip, i, 1, skip, take});
      skip += static_cast<size_t>(take);
    }
  }
  if (direction == IoDirection::kRead) {
    // Announce each contiguous span of the file: the kernel reads it ahead in large I/Os while
    // the requests (at most IOV_MAX pieces each) copy it out. Only the bytes to be read.
    for (size_t k = 0; k < requests.size();) {
      size_t end = k + 1;
      uint64_t span_end = requests[k].offset + requests[k].bytes;
      while (end < requests.size() && requests[end].fd == requests[k].fd &&
             requests[end].offset == span_end) {
        span_end += requests[end].bytes;
        ++end;
      }
      ::posix_fadvise(requests[k].fd, static_cast<off_t>(requests[k].offset),
                      static_cast<off_t>(span_end - requests[k].offset), POSIX_FADV_WILLNEED);
      k = end;
    }
  }
  auto run_one = [&](size_t k) {
    run_request(requests[k], pieces, direction);
    if (options.on_bytes) options.on_bytes(requests[k].bytes);
  };
  if (options.pool != nullptr && requests.size() > 1) {
    options.pool->parallel_for(requests.size(), run_one);
  } else {
    for (size_t k = 0; k < requests.size(); ++k) run_one(k);
  }
  return total;
}

}  // namespace meshlayout
