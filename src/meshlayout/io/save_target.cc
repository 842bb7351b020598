#include "meshlayout/io/save_target.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  std::string out(name);
  for (char& c : out) {
    if (c == '-' || c == '/' || static_cast<unsigned char>(c) < 0x20)
      c = '_';  // '-' separates fields
  }
  return out;
}

bool process_is_gone(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// The pid in "<host>-<pid>-<hex>" when host is this host, or in "<pid>-<hex>" (older form).
long local_pid_of(std::string_view token, const std::string& host) {
  const auto digits = [](std::string_view t) {
    return !t.empty() && t.size() < 10 &&
           t.find_first_not_of("0123456789") == std::string_view::npos;
  };
  std::vector<std::string> parts = split(token, '-');
  if (parts.size() == 3 && parts[0] == host && digits(parts[1])) return std::stol(parts[1]);
  if (parts.size() == 2 && digits(parts[0])) return std::stol(parts[0]);
  return -1;
}

}  // namespace

fs::path resolve_save_target(const std::string& path) {
  const fs::path target(path);
  if (path.empty() || target.filename().empty()) {
    throw ValueError(fmt::format("{} names no file to save to", quote(path)));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return target;  // a new file (or a dangling link, replaced)
    throw Error(fmt::format("cannot save to {}: {}", quote(path), std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    throw ValueError(fmt::format(
        "cannot save to {}: it exists and is {}; a checkpoint is written as a regular file, and "
        "saving would replace it: choose another path",
        quote(path), file_kind(st.st_mode)));
  }
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    std::error_code ec;
    fs::path real = fs::canonical(target, ec);
    if (!ec) return real;  // keep the link; replace the file it names
  }
  return target;
}

std::string make_save_token() {
  std::random_device rd;
  return fmt::format("{}-{}-{:08x}", host_name(), ::getpid(), rd());
}

std::string temporary_save_name(const fs::path& target, std::string_view token) {
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  return (dir / fmt::format(".{}.tmp-{}", target.filename().string(), token)).string();
}

std::vector<std::string> remove_stale_temporaries(const fs::path& target) {
  std::vector<std::string> removed;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = fmt::format(".{}.tmp-", target.filename().string());
  const std::string host = host_name();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!process_is_gone(local_pid_of(std::string_view(name).substr(prefix.size()), host)))
      continue;
    if (::unlink(it->path().c_str()) == 0) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace meshlayout
