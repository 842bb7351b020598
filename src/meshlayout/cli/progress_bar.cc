#include "meshlayout/cli/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "meshlayout/plan/text_format.h"

namespace meshlayout::cli {

bool stderr_is_terminal() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDERR_FILENO) == 1 && !(term && std::strcmp(term, "dumb") == 0);
}

ProgressBar::ProgressBar(std::ostream& out, std::string label, bool enabled,
                         Clock::duration min_interval)
    : out_(out), label_(std::move(label)), enabled_(enabled), min_interval_(min_interval) {}

std::string ProgressBar::render(const std::string& label, uint64_t done, uint64_t total,
                                double seconds, int width) {
  const double fraction =
      total == 0 ? 1.0 : std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  const int filled = static_cast<int>(fraction * width);
  std::string line = fmt::format("{} [{}{}] {:3.0f}%  {} / {}", label,
                                 std::string(static_cast<size_t>(filled), '#'),
                                 std::string(static_cast<size_t>(width - filled), '.'),
                                 fraction * 100, format_bytes(done), format_bytes(total));
  if (seconds > 0) {
    line += fmt::format("  {}/s",
                        format_bytes(static_cast<uint64_t>(static_cast<double>(done) / seconds)));
  }
  return line;
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  const Clock::time_point now = Clock::now();
  if (drawn_ && done < total && now - last_draw_ < min_interval_) return;
  last_draw_ = now;
  drawn_ = true;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  out_ << '\r' << render(label_, done, total, seconds) << "\x1b[K" << std::flush;
}

std::function<void(uint64_t, uint64_t)> ProgressBar::callback() {
  return [this](uint64_t done, uint64_t total) { update(done, total); };
}

void ProgressBar::finish() {
  std::lock_guard lock(mu_);
  if (drawn_) out_ << '\n' << std::flush;
  drawn_ = false;
}

}  // namespace meshlayout::cli
