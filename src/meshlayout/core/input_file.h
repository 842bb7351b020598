// input_file.h — opening and reading input files safely: only regular files (a FIFO, device,
// socket or directory is refused without blocking), with a size limit, and with errors that
// say why a path cannot be used (does not exist, permission denied, symlink loop, name too
// long, …) from errno rather than guessing.
//
// Example:
//   std::string text = read_regular_file("rules.json", kMaxJsonFileBytes, "rules file");
//   int fd = open_regular_file("model.safetensors", "checkpoint file");  // caller closes
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace meshlayout {

/// The largest JSON file (rules file, *.index.json) meshlayout reads: 64 MiB.
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;

/// "a directory", "a FIFO (named pipe)", "a character device", … for a stat() st_mode.
std::string_view file_kind(mode_t mode);

/// Why `path` (a `what`, e.g. "rules file") cannot be opened, from `err` (an errno value):
/// "rules file 'x' does not exist", "… : permission denied (EACCES)", "… : too many levels of
/// symbolic links (ELOOP; a symlink loop?)", ….
std::string describe_open_error(std::string_view what, std::string_view path, int err);

/// Opens `path` read-only (close-on-exec) without ever blocking: O_NONBLOCK until fstat()
/// shows a regular file, then cleared. Returns the descriptor (the caller closes it).
/// Throws NotFoundError when the path does not exist, ValueError for anything that is not a
/// regular file (naming what it is) and for every other errno (with its text).
int open_regular_file(const std::string& path, std::string_view what);

/// The whole content of the regular file `path`, refused (ValueError naming the limit and the
/// size) when it holds more than `max_bytes`. Errors as open_regular_file, plus read errors.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view what);

}  // namespace meshlayout
