#include "meshlayout/runtime/thread_pool.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

// How long an idle thread polls before it blocks (see thread_pool.h).
constexpr auto kSpin = std::chrono::microseconds(50);

// Polls `ready` for up to kSpin: a few polls with a pause instruction between them (no system
// call), then a yield of the core to any other runnable thread, and again; true once it holds.
template <typename Ready>
bool poll_for(const Ready& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 32; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    }
    std::this_thread::yield();
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

}  // namespace

std::optional<size_t> thread_count_from_environment() {
  const char* text = std::getenv(kThreadsEnvVar);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const int64_t n = parse_int64(text, fmt::format("environment variable {}", kThreadsEnvVar));
  if (n < 1 || n > static_cast<int64_t>(kMaxThreads)) {
    throw ValueError(fmt::format("{}={} must be a thread count from 1 to {}", kThreadsEnvVar, text,
                                 kMaxThreads));
  }
  return static_cast<size_t>(n);
}

size_t available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<size_t>(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

size_t default_thread_count() { return thread_count_from_environment().value_or(available_cpus()); }

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = default_thread_count();
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker_loop() {
  while (true) {
    std::function<void()> task;
    poll_for([this] {
      return stop_.load(std::memory_order_relaxed) || queued_.load(std::memory_order_acquire) > 0;
    });
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_.load() || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.store(queue_.size(), std::memory_order_relaxed);
    }
    task();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  parallel_for_after(nullptr, n, fn);
}

void ThreadPool::parallel_for_after(const std::function<void()>& first, size_t n,
                                    const std::function<void(size_t)>& fn) {
  if (n == 0 || workers_.empty()) {
    if (first) first();
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // The caller waits for all n items to complete, not for the helper tasks to run: a helper
  // that starts late finds nothing left and never touches `fn`, so parallel_for may even be
  // called from inside a task without deadlocking.
  struct State {
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable done_cv;
    std::atomic<size_t> completed{0};
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  const std::function<void(size_t)>* fn_ptr = &fn;
  auto drain = [state, n, fn_ptr] {
    while (true) {
      size_t i = state->next.fetch_add(1);
      if (i >= n) break;
      std::exception_ptr error;
      try {
        (*fn_ptr)(i);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(state->mu);
      if (error && !state->error) state->error = error;
      if (++state->completed == n) state->done_cv.notify_all();
    }
  };
  const size_t helpers = std::min(workers_.size(), first ? n : n - 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t h = 0; h < helpers; ++h) queue_.emplace_back(drain);
    queued_.store(queue_.size(), std::memory_order_release);
  }
  cv_.notify_all();
  std::exception_ptr first_error;
  if (first) {
    try {
      first();
    } catch (...) {
      first_error = std::current_exception();
    }
  }
  drain();
  poll_for([&] { return state->completed.load(std::memory_order_acquire) == n; });
  std::unique_lock<std::mutex> lock(state->mu);
  state->done_cv.wait(lock, [&] { return state->completed == n; });
  if (first_error) std::rethrow_exception(first_error);
  if (state->error) std::rethrow_exception(state->error);
}

}  // namespace meshlayout
