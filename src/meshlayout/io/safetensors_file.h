// safetensors_file.h — reading safetensors checkpoints box by box.
//
// SafetensorsFile::open reads only the 8-byte prefix and the header (validated as
// safetensors_header.h says). read_box() then reads one box of one tensor with pread/preadv,
// touching only the byte ranges of that box; ReadBatch gathers the boxes of many tensors and
// reads them in parallel, merging file-adjacent pieces into one preadv. Every byte read is
// counted (bytes_read()), so tests and benchmarks can check what a process read.
//
// Checkpoint::open takes a .safetensors file, a model.safetensors.index.json (Hugging Face
// sharded checkpoints: {"weight_map": {tensor name: file name}}), or a directory holding
// either, and finds each tensor in its file.
//
// Example:
//   Checkpoint ckpt = Checkpoint::open("model.safetensors");
//   const auto& [file, info] = ckpt.at("dense/kernel");
//   std::vector<std::byte> rows(2 * info.shape[1] * info.element_size);
//   file->read_box(info, Box{{4, 0}, {2, info.shape[1]}}, rows.data());   // rows 4 and 5
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshlayout/io/safetensors_header.h"
#include "meshlayout/io/vectored_io.h"
#include "meshlayout/layout/shard_geometry.h"

namespace meshlayout {

class ThreadPool;

class SafetensorsFile {
 public:
  /// Opens and validates the header. NotFoundError if the file cannot be opened; DataLossError
  /// naming the path and the tensor or byte offset if the header is invalid.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  int fd() const { return fd_; }

  /// Reads region `box` of `tensor` (in the file's dtype) into `dst`, a row-major buffer
  /// holding exactly `box`. ValueError if the box is not inside the tensor; DataLossError
  /// naming the tensor and file offset if the file is shorter than its header says.
  void read_box(const TensorInfo& tensor, const Box& box, std::byte* dst) const;

  /// Bytes read from this file so far (header included), over all threads.
  uint64_t bytes_read() const { return bytes_read_.load(); }
  void count_read(uint64_t bytes) const { bytes_read_ += bytes; }
  /// The file's size in bytes.
  uint64_t file_bytes() const { return header_.file_bytes(); }

 private:
  SafetensorsFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
  SafetensorsHeader header_;
  mutable std::atomic<uint64_t> bytes_read_{0};
};

/// Many box reads, executed together: pieces adjacent in the file are merged into one preadv
/// (up to IOV_MAX pieces and `max_request_bytes` per call), and the calls are spread over a
/// thread pool (vectored_io.h). Each file counts the bytes read from it.
class ReadBatch {
 public:
  /// Adds region `box` of `tensor` in `file`, to land in `dst` (a row-major buffer holding
  /// `box`). ValueError if the box is not inside the tensor.
  void add(const SafetensorsFile& file, const TensorInfo& tensor, const Box& box, std::byte* dst);
  /// Makes room for `pieces` more contiguous runs (count_contiguous_runs in box_ops.h): a
  /// column-sharded load adds 100,000s, and growing the list costs more than reading them.
  void reserve(size_t pieces) { pieces_.reserve(pieces_.size() + pieces); }
  /// Bytes the batch will read.
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return pieces_.empty(); }
  /// Reads everything and empties the batch. `options.on_bytes` sees each request's bytes.
  void run(const VectoredIoOptions& options = {});

 private:
  std::vector<IoPiece> pieces_;
  std::map<const SafetensorsFile*, uint64_t> file_bytes_;  // bytes to count per file
  uint64_t bytes_ = 0;
};

/// A checkpoint of one or more safetensors files.
class Checkpoint {
 public:
  /// A .safetensors file, a *.safetensors.index.json, or a directory holding
  /// model.safetensors.index.json or model.safetensors. NotFoundError / DataLossError naming
  /// the path otherwise; a tensor the index maps to a file that lacks it is a DataLossError.
  static Checkpoint open(const std::string& path);

  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  /// Every tensor, in file order then data order.
  const std::vector<std::pair<const SafetensorsFile*, const TensorInfo*>>& tensors() const {
    return tensors_;
  }
  /// The path given to open().
  const std::string& path() const { return path_; }
  /// The file and header entry of tensor `name`, or {nullptr, nullptr}.
  std::pair<const SafetensorsFile*, const TensorInfo*> find(std::string_view name) const;
  /// Metadata of the first file (the index's "metadata" is not string-valued).
  const std::map<std::string, std::string>& metadata() const;
  /// Bytes read from all files so far.
  uint64_t bytes_read() const;
  /// Sum of the files' sizes.
  uint64_t file_bytes() const;

 private:
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<const SafetensorsFile*, const TensorInfo*>> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;
};

}  // namespace meshlayout
