// save_directory.h — a directory that a save of several files fills (a trained model, its
// optimizer state): after any interruption it is complete or recognisably incomplete, and two
// runs never save into it at once.
//
// SaveDirectory::claim() is called before the work whose result will be saved (so a bad path
// is found before hours of training, not after): it refuses a path that is not a new or empty
// directory (a file, a dangling link, a parent that is a file), creates the directory, takes
// an exclusive lock (flock on `.meshlayout-save.lock`, which stays in the directory until the
// save is finished) and checks the directory is writable. finish() writes the completion
// marker `meshlayout_save.json` last (atomically) and removes the lock file. A directory that
// still holds the lock file, or lacks the marker, is incomplete: check_save_complete() says so.
// A lock file left by a killed run (not flock-held) does not stop a new claim.
//
// Example:
//   SaveDirectory save = SaveDirectory::claim("out", "--save", /*keep=*/"model_dir");
//   … train …
//   write_files(save.path());
//   save.finish({{"optimizer", "adamw"}, {"iterations", 10}});
//   check_save_complete("out", {"optimizer.safetensors"});   // returns: it is complete
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace meshlayout {

inline constexpr const char* kSaveLockFile = ".meshlayout-save.lock";
inline constexpr const char* kSaveCompleteFile = "meshlayout_save.json";

class SaveDirectory {
 public:
  /// Claims `dir` (see above). `option` names it in messages ("--save"); `keep`, if not empty,
  /// is a directory the save must not be (the model the run started from). ValueError naming
  /// the path and what it is when it cannot be used; FailedPreconditionError when another
  /// process holds the lock (another run is saving into it).
  static SaveDirectory claim(const std::string& dir, std::string_view option,
                             const std::string& keep = "");

  SaveDirectory(SaveDirectory&& other) noexcept;
  SaveDirectory& operator=(SaveDirectory&& other) noexcept;
  SaveDirectory(const SaveDirectory&) = delete;
  SaveDirectory& operator=(const SaveDirectory&) = delete;
  /// Releases the lock; the lock file stays unless finish() ran, so the directory reads as
  /// incomplete.
  ~SaveDirectory();

  const std::string& path() const { return path_; }
  /// Writes `marker` as `meshlayout_save.json` (temporary file, fsync, rename), then removes
  /// the lock file and releases the lock.
  void finish(const nlohmann::json& marker);
  /// Gives the claim up before anything was saved (the work failed): removes the lock file,
  /// and the directory too if claim() created it and it is empty. Never throws.
  void abandon() noexcept;

 private:
  SaveDirectory(std::string path, int lock_fd, bool created)
      : path_(std::move(path)), lock_fd_(lock_fd), created_(created) {}
  std::string path_;
  int lock_fd_ = -1;
  bool created_ = false;  // claim() made the directory
};

/// Throws FailedPreconditionError naming `dir` when it holds an interrupted (or running) save:
/// its lock file is there, or one of `saved_files` is there without the completion marker.
/// A directory with neither (written by another tool) passes.
void check_save_complete(const std::string& dir, std::span<const std::string> saved_files);

/// The completion marker of `dir`, or null when it has none. DataLossError if it is not JSON.
nlohmann::json read_save_marker(const std::string& dir);

/// A new private directory under $TMPDIR (else /tmp) for a save whose target failed, so that
/// a finished run is not lost: "<tmp>/meshlayout-save-XXXXXX".
std::string make_fallback_save_dir();

}  // namespace meshlayout
