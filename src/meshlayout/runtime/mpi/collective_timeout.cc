#include "meshlayout/runtime/mpi/collective_timeout.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

using Clock = std::chrono::steady_clock;

// The collective in progress: its name and start time (0 = none). One per process: meshlayout
// calls MPI from one thread at a time (MPI_THREAD_SERIALIZED).
std::atomic<const char*> g_call{nullptr};
std::atomic<int64_t> g_started_ns{0};
thread_local int t_depth = 0;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void abort_job(const char* call, double seconds) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr,
               "meshlayout: process %d: error: %s has not completed after %g s (%s=%g): another "
               "process is stopped, has died, or is running a different operation; aborting "
               "every process\n",
               rank, call, seconds, kCollectiveTimeoutEnvVar, seconds);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// Started once, the first time a collective runs with a timeout set; lives for the process.
void start_watchdog(double seconds) {
  static std::once_flag once;
  std::call_once(once, [seconds] {
    std::thread([seconds] {
      const auto limit_ns = static_cast<int64_t>(seconds * 1e9);
      const auto tick = std::chrono::milliseconds(
          std::clamp<int64_t>(static_cast<int64_t>(seconds * 100), 10, 1000));
      while (true) {
        std::this_thread::sleep_for(tick);
        const int64_t started = g_started_ns.load(std::memory_order_acquire);
        if (started != 0 && now_ns() - started > limit_ns) {
          const char* call = g_call.load(std::memory_order_acquire);
          // Still the same collective (a new one resets the start time)?
          if (g_started_ns.load(std::memory_order_acquire) == started) {
            abort_job(call ? call : "an MPI collective", seconds);
          }
        }
      }
    }).detach();
  });
}

}  // namespace

std::optional<double> collective_timeout_seconds() {
  const char* text = std::getenv(kCollectiveTimeoutEnvVar);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(seconds) || seconds < 0 || seconds > 1e9) {
    throw ValueError(fmt::format(
        "environment variable {}={} must be a number of seconds from 0 (no timeout) to 1e9",
        kCollectiveTimeoutEnvVar, quote(text)));
  }
  if (seconds == 0) return std::nullopt;
  return seconds;
}

CollectiveDeadline::CollectiveDeadline(const char* call) {
  if (t_depth++ > 0) return;
  static const std::optional<double> timeout = collective_timeout_seconds();
  if (!timeout) return;
  start_watchdog(*timeout);
  outermost_ = true;
  g_call.store(call, std::memory_order_release);
  g_started_ns.store(now_ns(), std::memory_order_release);
}

CollectiveDeadline::~CollectiveDeadline() {
  --t_depth;
  if (outermost_) g_started_ns.store(0, std::memory_order_release);
}

}  // namespace meshlayout
