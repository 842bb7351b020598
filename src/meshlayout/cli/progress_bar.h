// progress_bar.h — a one-line progress bar for long loads and saves, drawn on a terminal only.
//
// ProgressBar draws `label [#####.....]  42%  420.0 MiB / 1.0 GiB  1.2 GiB/s` on one line,
// redrawn in place with '\r' at most every `min_interval` (and always at 100%), and ends the
// line in finish(). When disabled (the default for a stream that is not a terminal: see
// stderr_is_terminal()) it prints nothing, so logs and pipes stay clean. update() may be
// called from any thread (the I/O reports progress from workers); calls are serialised.
//
// Example:
//   ProgressBar bar(std::cerr, "saving", stderr_is_terminal());
//   save_arrays(path, arrays, {.progress = bar.callback()});
//   bar.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>

namespace meshlayout::cli {

/// True when stderr is a terminal (and TERM is not "dumb").
bool stderr_is_terminal();

class ProgressBar {
 public:
  using Clock = std::chrono::steady_clock;

  ProgressBar(std::ostream& out, std::string label, bool enabled,
              Clock::duration min_interval = std::chrono::milliseconds(100));
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// Records progress; redraws when enough time has passed or when done == total.
  void update(uint64_t done, uint64_t total);
  /// update() as a callable for SaveOptions / LoadOptions::progress.
  std::function<void(uint64_t, uint64_t)> callback();
  /// Ends the line (if anything was drawn). Idempotent.
  void finish();

  /// The line for a state, without '\r': exposed for tests.
  static std::string render(const std::string& label, uint64_t done, uint64_t total, double seconds,
                            int width = 30);

 private:
  std::ostream& out_;
  std::string label_;
  bool enabled_;
  Clock::duration min_interval_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
  bool drawn_ = false;
  std::mutex mu_;
};

}  // namespace meshlayout::cli
