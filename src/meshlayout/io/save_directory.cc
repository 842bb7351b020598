// save_directory.cc — see save_directory.h.
#include "meshlayout/io/save_directory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

// What is at `path` (not following a final symlink), for messages.
std::string describe_existing(const fs::path& path) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (fs::is_symlink(link)) {
    return fs::exists(fs::status(path, ec)) ? "a symbolic link to something that is not a directory"
                                            : "a dangling symbolic link";
  }
  if (fs::is_regular_file(link)) return "a regular file";
  if (fs::is_character_file(link)) return "a character device";
  if (fs::is_block_file(link)) return "a block device";
  if (fs::is_fifo(link)) return "a FIFO";
  if (fs::is_socket(link)) return "a socket";
  return "not a directory";
}

// The names in `dir` other than the lock file (and the hidden temporaries of interrupted file
// saves, which remove_stale_temporaries cleans): what a claim would replace.
std::vector<std::string> contents_besides_lock(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kSaveLockFile) continue;
    names.push_back(name);
  }
  return names;
}

void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("writing {} failed: {}", quote(path), errno_text()));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

SaveDirectory SaveDirectory::claim(const std::string& dir, std::string_view option,
                                   const std::string& keep) {
  if (dir.empty())
    throw ValueError(fmt::format("{} is empty: give a new or empty directory", option));
  const fs::path path(dir);
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  bool created = false;
  if (fs::exists(link) || fs::is_symlink(link)) {
    if (!fs::is_directory(fs::status(path, ec))) {
      throw ValueError(fmt::format("{} {}: it exists and is {} (give a new or empty directory)",
                                   option, quote(dir), describe_existing(path)));
    }
    if (!keep.empty() && fs::equivalent(path, keep, ec)) {
      throw ValueError(
          fmt::format("{} {} is the --model directory; save to a new or empty directory so the "
                      "model you started from is kept",
                      option, quote(dir)));
    }
    const std::vector<std::string> names = contents_besides_lock(path);
    if (!names.empty()) {
      std::vector<std::string> shown;
      for (size_t i = 0; i < names.size() && i < 3; ++i) shown.push_back(quote(names[i]));
      throw ValueError(
          fmt::format("{} {}: the directory is not empty (it holds {}{}); a save goes into a new "
                      "or empty directory so it "
                      "replaces nothing",
                      option, quote(dir), join(shown, ", "),
                      names.size() > 3 ? fmt::format(" and {} more", names.size() - 3) : ""));
    }
  } else {
    // A parent that is a file, or a directory this process may not write, is found now.
    created = fs::create_directories(path, ec);
    if (ec) {
      throw ValueError(
          fmt::format("{} {}: cannot create the directory: {}", option, quote(dir), ec.message()));
    }
  }
  const std::string lock_path = (path / kSaveLockFile).string();
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ValueError(fmt::format("{} {}: the directory is not writable (creating {} failed: {})",
                                 option, quote(dir), kSaveLockFile, errno_text()));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    char buf[64] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0)
      holder =
          fmt::format(" ({})", std::string(trim(std::string_view(buf, static_cast<size_t>(n)))));
    ::close(fd);
    if (err == EWOULDBLOCK) {
      throw FailedPreconditionError(
          fmt::format("{} {}: another run is saving into this directory{} (it holds the lock {}); "
                      "give another directory",
                      option, quote(dir), holder, kSaveLockFile));
    }
    throw ValueError(fmt::format("{} {}: cannot lock {}: {}", option, quote(dir), kSaveLockFile,
                                 std::strerror(err)));
  }
  // The holder, for the message a second run gets.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const std::string why = errno_text();
    ::close(fd);
    throw ValueError(fmt::format("{} {}: the directory is not writable (writing {} failed: {})",
                                 option, quote(dir), kSaveLockFile, why));
  }
  return SaveDirectory(dir, fd, created);
}

SaveDirectory::SaveDirectory(SaveDirectory&& other) noexcept
    : path_(std::move(other.path_)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      created_(other.created_) {}

SaveDirectory& SaveDirectory::operator=(SaveDirectory&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    path_ = std::move(other.path_);
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    created_ = other.created_;
  }
  return *this;
}

SaveDirectory::~SaveDirectory() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void SaveDirectory::finish(const nlohmann::json& marker) {
  if (lock_fd_ < 0)
    throw FailedPreconditionError(
        fmt::format("the save into {} is already finished", quote(path_)));
  const fs::path target = fs::path(path_) / kSaveCompleteFile;
  const std::string tmp =
      (fs::path(path_) / fmt::format(".{}.tmp-{}", kSaveCompleteFile, ::getpid())).string();
  const std::string text = marker.dump(2) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("creating {} failed: {}", quote(tmp), errno_text()));
  try {
    write_all(fd, text, tmp);
    if (::fsync(fd) != 0)
      throw Error(fmt::format("flushing {} failed: {}", quote(tmp), errno_text()));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(
        fmt::format("renaming {} to {} failed: {}", quote(tmp), quote(target.string()), why));
  }
  const int dir_fd = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {  // make the rename durable before the lock goes
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  ::unlink((fs::path(path_) / kSaveLockFile).c_str());
  ::close(std::exchange(lock_fd_, -1));
}

void SaveDirectory::abandon() noexcept {
  if (lock_fd_ < 0) return;
  ::unlink((fs::path(path_) / kSaveLockFile).c_str());
  if (created_) ::rmdir(path_.c_str());  // fails, harmlessly, unless it is empty
  ::close(std::exchange(lock_fd_, -1));
}

void check_save_complete(const std::string& dir, std::span<const std::string> saved_files) {
  const fs::path path(dir);
  std::error_code ec;
  if (fs::exists(path / kSaveLockFile, ec)) {
    throw FailedPreconditionError(
        fmt::format("{} is an incomplete save: it still holds {} (the run saving into it was "
                    "interrupted, or is still "
                    "running), so its files may be missing or from different steps; use a "
                    "completed save, or remove the "
                    "directory",
                    quote(dir), kSaveLockFile));
  }
  if (fs::exists(path / kSaveCompleteFile, ec)) return;
  for (const std::string& name : saved_files) {
    if (fs::exists(path / name, ec)) {
      throw FailedPreconditionError(
          fmt::format("{} holds {} but no {}: the save that wrote it did not finish, so its files "
                      "may be from different "
                      "steps; use a completed save, or remove {} to start the optimizer afresh",
                      quote(dir), quote(name), kSaveCompleteFile, quote(name)));
    }
  }
}

nlohmann::json read_save_marker(const std::string& dir) {
  const fs::path path = fs::path(dir) / kSaveCompleteFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return nullptr;
  const std::string text = read_regular_file(path.string(), kMaxJsonFileBytes, "save marker");
  try {
    return parse_json_checked(text);
  } catch (const Error& e) {
    throw DataLossError(fmt::format("{} is not valid JSON: {}", quote(path.string()), e.what()));
  }
}

std::string make_fallback_save_dir() {
  const char* env = std::getenv("TMPDIR");
  std::string pattern = (fs::path(env && *env ? env : "/tmp") / "meshlayout-save-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(
        fmt::format("creating a temporary directory {} failed: {}", quote(pattern), errno_text()));
  }
  return pattern;
}

}  // namespace meshlayout
