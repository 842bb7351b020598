#include "meshlayout/plan/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/save_target.h"

namespace meshlayout {

void write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const auto refuse = [&](const std::string& why) {
    throw ValueError(fmt::format("cannot write {} {}: {}", what, quote(path), why));
  };
  if (path.empty() || target.filename().empty()) refuse("it names no file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    refuse(fmt::format("it exists and is {}; give a file name", file_kind(st.st_mode)));
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (::stat(dir.c_str(), &st) != 0) {
    refuse(errno == ENOENT
               ? fmt::format("directory {} does not exist", quote(dir.string()))
               : fmt::format("directory {}: {}", quote(dir.string()), std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    refuse(fmt::format("{} is {}, not a directory", quote(dir.string()), file_kind(st.st_mode)));
  }
  const std::string tmp = temporary_save_name(target, make_save_token());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    refuse(
        fmt::format("cannot create a file in {}: {}", quote(dir.string()), std::strerror(errno)));
  }
  const auto fail = [&](int err, std::string_view step) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing {} {} failed while {}: {}", what, quote(path), step,
                            std::strerror(err)));
  };
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(n < 0 ? errno : ENOSPC, "writing");
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd) != 0 && errno != EINVAL && errno != EROFS) fail(errno, "syncing");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing {} {} failed: {}", what, quote(path), std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing {} {} failed while renaming: {}", what, quote(path),
                            std::strerror(err)));
  }
}

}  // namespace meshlayout
