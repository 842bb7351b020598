// save_target.h — where an atomic save writes, decided before anything is written.
//
// resolve_save_target() refuses a target that exists and is not a regular file (a device
// node, a FIFO, a directory, a socket: saving would replace it with a regular file), and
// follows a symlink to a regular file so that the link is kept and the file it names is
// replaced. temporary_save_name() names the file a save writes before its rename, and
// remove_stale_temporaries() deletes such files left by saves of this host whose process has
// died (killed mid-save), so a crash does not leave a full-size file behind forever.
//
// Example:
//   std::filesystem::path target = resolve_save_target("ckpt/model.safetensors");
//   remove_stale_temporaries(target);        // .model.safetensors.tmp-host-4242-… of dead pids
//   std::string tmp = temporary_save_name(target, "host-4243-9f3a1c20");
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {

/// The file a save to `path` must replace: `path` itself, or the regular file a symlink at
/// `path` resolves to. ValueError naming the path and what it is for anything else that
/// exists; ValueError for a path that names no file (empty, or ending in '/').
std::filesystem::path resolve_save_target(const std::string& path);

/// "<host>-<pid>-<random hex>": unique per save, and tells which process on which host owns it.
std::string make_save_token();

/// `<dir>/.<file name>.tmp-<token>` for target `<dir>/<file name>`.
std::string temporary_save_name(const std::filesystem::path& target, std::string_view token);

/// Removes `.<file name>.tmp-<host>-<pid>-…` files next to `target` whose host is this host
/// and whose process no longer exists (also the older `.tmp-<pid>-…` form). Returns the paths
/// removed. Errors are ignored: this is housekeeping, never a reason for a save to fail.
std::vector<std::string> remove_stale_temporaries(const std::filesystem::path& target);

}  // namespace meshlayout
