// progress.cc — see progress.h.
#include "meshlayout/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

std::string time_per_step(double seconds, int64_t steps) {
  const double per = steps > 0 ? seconds / static_cast<double>(steps) : 0.0;
  if (per >= 1.0) return fmt::format("{:.0f}s/step", per);
  if (per >= 1e-3) return fmt::format("{:.0f}ms/step", per * 1e3);
  return fmt::format("{:.0f}us/step", per * 1e6);
}

std::string loss_text(double loss) { return fmt::format("loss: {:.4f}", loss); }

}  // namespace

bool stderr_is_a_terminal() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) != 0 && (term == nullptr || std::strcmp(term, "dumb") != 0);
}

ProgressMode progress_mode(int verbose, bool terminal) {
  switch (verbose) {
    case 0:
      return ProgressMode::kSilent;
    case 1:
      return terminal ? ProgressMode::kBar : ProgressMode::kLine;
    case 2:
      return ProgressMode::kLine;
    default:
      throw ValueError(
          fmt::format("verbose must be 0 (silent), 1 (auto: a progress bar on a terminal) or 2 "
                      "(one line per epoch), got {}",
                      verbose));
  }
}

EpochProgress::EpochProgress(std::ostream& out, ProgressMode mode, int64_t epoch, int64_t epochs,
                             int64_t steps)
    : out_(out), mode_(mode), steps_(steps) {
  if (mode_ != ProgressMode::kSilent && epochs > 0)
    out_ << fmt::format("Epoch {}/{}\n", epoch + 1, epochs) << std::flush;
}

double EpochProgress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void EpochProgress::update(int64_t done, double mean_loss) {
  if (mode_ != ProgressMode::kBar) return;
  out_ << '\r' << render_bar(done, steps_, seconds(), mean_loss) << std::flush;
}

void EpochProgress::finish(double mean_loss) {
  if (mode_ == ProgressMode::kBar) {
    out_ << '\r' << render_bar(steps_, steps_, seconds(), mean_loss) << '\n' << std::flush;
  } else if (mode_ == ProgressMode::kLine) {
    out_ << render_line(steps_, seconds(), mean_loss) << '\n' << std::flush;
  }
}

std::string EpochProgress::render_bar(int64_t done, int64_t steps, double seconds, double mean_loss,
                                      int width) {
  const int64_t filled = steps > 0 ? done * width / steps : width;
  std::string bar;
  for (int64_t i = 0; i < width; ++i) bar += i < filled ? "\u2501" : "\u2500";  // ━ done, ─ to do
  const std::string digits = std::to_string(steps);
  return fmt::format("{:>{}}/{} {} {:.0f}s {} - {}", done, digits.size(), steps, bar,
                     std::floor(seconds), time_per_step(seconds, done), loss_text(mean_loss));
}

std::string EpochProgress::render_line(int64_t steps, double seconds, double mean_loss) {
  return fmt::format("{}/{} - {:.0f}s - {} - {}", steps, steps, std::floor(seconds),
                     time_per_step(seconds, steps), loss_text(mean_loss));
}

}  // namespace meshlayout
