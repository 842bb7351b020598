// vectored_io.h — many (file offset, memory, bytes) pieces read or written together.
//
// The pieces are sorted by file and offset; pieces adjacent in the file become one
// preadv/pwritev (up to IOV_MAX pieces and `max_request_bytes` per call; a larger piece is
// cut), and the calls run in parallel on a thread pool. Short transfers are resumed; EINTR is
// retried. The checkpoint reader (ReadBatch) and writer (save_arrays) are built on it.
//
// Example:
//   std::vector<IoPiece> pieces{{fd, 4096, buffer, 1 << 20, "dense/kernel", "model.safetensors"}};
//   run_vectored_io(pieces, IoDirection::kRead, {.pool = &pool});
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace meshlayout {

class ThreadPool;

struct IoPiece {
  int fd;
  uint64_t offset;    // in the file
  std::byte* memory;  // read into / written from
  size_t bytes;
  std::string_view what;  // the tensor the piece belongs to, for messages
  std::string_view file;  // the file's name, for messages
};

enum class IoDirection { kRead, kWrite };

struct VectoredIoOptions {
  ThreadPool* pool = nullptr;  // null: the calling thread does everything
  uint64_t max_request_bytes = 16 << 20;
  /// Called after each request with the bytes it moved, from the thread that moved them.
  std::function<void(uint64_t)> on_bytes;
};

/// Reads or writes every piece (sorting `pieces` in place). DataLossError naming the tensor,
/// the file and the byte offset if a read meets the end of the file; meshlayout::Error with
/// the system's reason for any other failure. Returns the bytes moved.
uint64_t run_vectored_io(std::vector<IoPiece>& pieces, IoDirection direction,
                         const VectoredIoOptions& options);

}  // namespace meshlayout
