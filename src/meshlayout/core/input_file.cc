#include "meshlayout/core/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

std::string_view errno_name(int err) {
  switch (err) {
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case ELOOP:
      return "ELOOP";
    case ENAMETOOLONG:
      return "ENAMETOOLONG";
    case ENOTDIR:
      return "ENOTDIR";
    case EISDIR:
      return "EISDIR";
    case EMFILE:
      return "EMFILE";
    case ENFILE:
      return "ENFILE";
    case ENXIO:
      return "ENXIO";
    case EIO:
      return "EIO";
    case ENOMEM:
      return "ENOMEM";
    case EOVERFLOW:
      return "EOVERFLOW";
    default:
      return "";
  }
}

// "permission denied (EACCES)": the system's text, with the errno name when known.
std::string errno_text(int err) {
  const std::string_view name = errno_name(err);
  std::string text = std::strerror(err);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  if (name.empty()) return fmt::format("{} (errno {})", text, err);
  return fmt::format("{} ({})", text, name);
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

}  // namespace

std::string_view file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

std::string describe_open_error(std::string_view what, std::string_view path, int err) {
  if (err == ENOENT) return fmt::format("{} {} does not exist", what, quote(path));
  if (err == ELOOP) {
    return fmt::format("cannot open {} {}: {}; a symlink loop?", what, quote(path),
                       errno_text(err));
  }
  return fmt::format("cannot open {} {}: {}", what, quote(path), errno_text(err));
}

int open_regular_file(const std::string& path, std::string_view what) {
  if (path.find('\0') != std::string::npos) {
    throw ValueError(fmt::format("{} {} contains a NUL byte", what, quote(path)));
  }
  // O_NONBLOCK: opening a FIFO with no writer (or some devices) would otherwise wait forever.
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (fd.fd < 0) {
    const int err = errno;
    if (err == ENOENT) throw NotFoundError(describe_open_error(what, path, err));
    throw ValueError(describe_open_error(what, path, err));
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    throw ValueError(fmt::format("cannot stat {} {}: {}", what, quote(path), errno_text(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    throw ValueError(
        fmt::format("{} {} is {}, not a regular file", what, quote(path), file_kind(st.st_mode)));
  }
  const int flags = ::fcntl(fd.fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    throw ValueError(
        fmt::format("cannot use {} {}: fcntl: {}", what, quote(path), errno_text(errno)));
  }
  return fd.release();
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view what) {
  Fd fd{open_regular_file(path, what)};
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    throw ValueError(fmt::format("cannot stat {} {}: {}", what, quote(path), errno_text(errno)));
  }
  auto too_large = [&](std::string_view size) {
    return ValueError(fmt::format("{} {} is {} bytes, over the limit of {} bytes for a {}", what,
                                  quote(path), size, max_bytes, what));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) throw too_large(std::to_string(st.st_size));
  // st_size may be 0 (files in /proc) or the file may grow: read until end of file, but never
  // more than max_bytes + 1.
  std::string text;
  text.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  while (true) {
    if (used == text.size()) {
      if (used > max_bytes) throw too_large("more than " + std::to_string(max_bytes));
      text.resize(std::min<uint64_t>(max_bytes + 1, std::max<uint64_t>(2 * used, 4096)));
    }
    const ssize_t n = ::read(fd.fd, text.data() + used, text.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ValueError(fmt::format("cannot read {} {}: {}", what, quote(path), errno_text(errno)));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > max_bytes) throw too_large("more than " + std::to_string(max_bytes));
  text.resize(used);
  return text;
}

}  // namespace meshlayout
