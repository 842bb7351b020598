#include "meshlayout/io/safetensors_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/box_ops.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

// pread of exactly `bytes` at `offset`, resuming short reads; DataLossError at end of file.
void pread_exact(int fd, std::byte* dst, size_t bytes, uint64_t offset, const std::string& path,
                 std::string_view what) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, dst, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("'{}': reading {} at byte {} failed: {}", path, what, offset,
                              std::strerror(errno)));
    }
    if (n == 0) {
      throw DataLossError(
          fmt::format("'{}': the file ends at byte {}, inside {} (truncated "
                      "file?)",
                      path, offset, what));
    }
    dst += n;
    bytes -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void check_box_inside(const TensorInfo& tensor, const Box& box, std::string_view path) {
  const Box whole{Shape(tensor.shape.size(), 0), tensor.shape};
  if (box.shape.size() != tensor.shape.size() || box.offset.size() != tensor.shape.size() ||
      !contains(whole, box)) {
    throw ValueError(fmt::format("'{}': box {} is not inside tensor '{}' of shape {}", path,
                                 box.to_string(), tensor.name, shape_to_string(tensor.shape)));
  }
}

// A path's file type from stat() (following symlinks); errno's reason when it has none.
struct stat stat_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      throw NotFoundError(describe_open_error("checkpoint", path, err));
    }
    throw ValueError(describe_open_error("checkpoint", path, err));
  }
  return st;
}

// The index {"metadata": {...}, "weight_map": {"tensor name": "file name", ...}}: a regular
// file of at most 64 MiB, depth-limited JSON without duplicate keys.
nlohmann::json read_index(const std::string& path) {
  const std::string text = read_regular_file(path, kMaxJsonFileBytes, "checkpoint index");
  try {
    return parse_json_checked(text);
  } catch (const ValueError& e) {
    throw DataLossError(fmt::format("{}: {}", quote(path), e.what()));
  }
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  // Never blocks (a FIFO named in an index hung here); refuses what is not a regular file.
  const int fd = open_regular_file(path, "checkpoint file");
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(path, fd));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw Error(fmt::format("cannot stat {}: {}", quote(path), std::strerror(errno)));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::byte prefix[8] = {};
  pread_exact(fd, prefix, std::min<uint64_t>(8, size), 0, path, "the header length");
  file->count_read(std::min<uint64_t>(8, size));
  // Checked against the file size before anything is sized from it.
  const uint64_t n = parse_safetensors_header_length(
      std::span<const std::byte>(prefix, 8).first(std::min<uint64_t>(8, size)), size, path);
  std::string text(n, '\0');
  pread_exact(fd, reinterpret_cast<std::byte*>(text.data()), n, 8, path, "the header");
  file->count_read(n);
  file->header_ = parse_safetensors_header(text, size, path);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::read_box(const TensorInfo& tensor, const Box& box, std::byte* dst) const {
  ReadBatch batch;
  batch.add(*this, tensor, box, dst);
  batch.run();
}

void ReadBatch::add(const SafetensorsFile& file, const TensorInfo& tensor, const Box& box,
                    std::byte* dst) {
  check_box_inside(tensor, box, file.path());
  const Box whole{Shape(tensor.shape.size(), 0), tensor.shape};
  const uint64_t base = file.header().data_start() + tensor.begin;
  uint64_t added = 0;
  for_each_contiguous_run(
      box, whole, box, tensor.element_size, [&](size_t dst_off, size_t file_off, size_t bytes) {
        pieces_.push_back(
            IoPiece{file.fd(), base + file_off, dst + dst_off, bytes, tensor.name, file.path()});
        added += bytes;
      });
  bytes_ += added;
  file_bytes_[&file] += added;
}

void ReadBatch::run(const VectoredIoOptions& options) {
  for (const auto& [file, bytes] : file_bytes_) file->count_read(bytes);
  file_bytes_.clear();
  bytes_ = 0;
  // The list keeps its capacity for the next batch; cleared even if the read throws.
  struct Clear {
    std::vector<IoPiece>& pieces;
    ~Clear() { pieces.clear(); }
  } clear{pieces_};
  run_vectored_io(pieces_, IoDirection::kRead, options);
}

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint ckpt;
  ckpt.path_ = path;
  std::error_code ec;
  fs::path p(path);
  // stat's errno says why (a symlink loop, a name too long, permission denied, …).
  if (S_ISDIR(stat_path(path).st_mode)) {
    // symlink_status: a dangling or looping link is chosen, so opening it says what is wrong.
    auto present = [&](const char* name) {
      return fs::symlink_status(p / name, ec).type() != fs::file_type::not_found && !ec;
    };
    if (present("model.safetensors.index.json")) {
      p /= "model.safetensors.index.json";
    } else if (present("model.safetensors")) {
      p /= "model.safetensors";
    } else {
      throw NotFoundError(
          fmt::format("directory '{}' holds neither model.safetensors.index.json "
                      "nor model.safetensors",
                      path));
    }
  }
  const std::string name = p.filename().string();
  if (name.ends_with(".index.json")) {
    const nlohmann::json index = read_index(p.string());
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw DataLossError(
          fmt::format("'{}': expected an object with a \"weight_map\" object "
                      "(tensor name -> file name)",
                      p.string()));
    }
    std::map<std::string, std::shared_ptr<SafetensorsFile>> by_file;
    std::vector<std::pair<std::string, std::string>> mapped;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string()) {
        throw DataLossError(fmt::format("{}: weight_map[{}] is {}; expected a file name",
                                        quote(p.string()), quote(tensor), file.type_name()));
      }
      const std::string f = file.get<std::string>();
      // A NUL ("\u0000" in JSON) would cut the name where the system reads it.
      if (f.empty() || f.find('/') != std::string::npos || f.find('\0') != std::string::npos ||
          f == "." || f == "..") {
        throw DataLossError(
            fmt::format("{}: weight_map[{}] is {}; expected a file name in the "
                        "index's directory (no '/', no NUL byte)",
                        quote(p.string()), quote(tensor), quote(f)));
      }
      if (!by_file.contains(f)) {
        by_file[f] = SafetensorsFile::open((p.parent_path() / f).string());
        ckpt.files_.push_back(by_file[f]);
      }
      mapped.emplace_back(tensor, f);
    }
    for (const auto& [tensor, f] : mapped) {
      const TensorInfo* info = by_file[f]->header().find(tensor);
      if (info == nullptr) {
        throw DataLossError(
            fmt::format("{}: the index maps tensor {} to {}, which does not "
                        "hold it",
                        quote(p.string()), quote(tensor), quote(f)));
      }
    }
  } else {
    ckpt.files_.push_back(SafetensorsFile::open(p.string()));
  }
  for (const auto& file : ckpt.files_) {
    for (const TensorInfo& t : file->header().tensors) {
      if (!ckpt.by_name_.emplace(t.name, ckpt.tensors_.size()).second) {
        const SafetensorsFile* other = ckpt.tensors_[ckpt.by_name_[t.name]].first;
        throw DataLossError(fmt::format("tensor {} is in both {} and {}", quote(t.name),
                                        quote(other->path()), quote(file->path())));
      }
      ckpt.tensors_.emplace_back(file.get(), &t);
    }
  }
  return ckpt;
}

std::pair<const SafetensorsFile*, const TensorInfo*> Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return {nullptr, nullptr};
  return tensors_[it->second];
}

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  static const std::map<std::string, std::string> kEmpty;
  return files_.empty() ? kEmpty : files_.front()->header().metadata;
}

uint64_t Checkpoint::bytes_read() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->bytes_read();
  return n;
}

uint64_t Checkpoint::file_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->file_bytes();
  return n;
}

}  // namespace meshlayout
