// thread_pool.h — a fixed pool of worker threads, sized to the cores, that runs the work of
// different devices in parallel.
//
// A sharded model calls parallel_for once per op, a few hundred times per forward pass, with
// items of 10 us to a few ms. Waking a sleeping worker through the condition variable costs
// tens of microseconds, so an idle worker first polls for new work for a short while
// (kSpin, 50 us: short runs of polls, then a yield of the core to any other runnable thread)
// sleeps, and the caller polls the same way for the last items to finish.
//
// Size: by default the CPUs this process may run on (its affinity mask: a process mpirun binds
// to one core gets one thread), or MESHLAYOUT_THREADS. Under mpirun, initialize() divides the
// node's CPUs between its processes (initialize.h).
//
// Example:
//   ThreadPool pool;                                  // default_thread_count() threads
//   pool.parallel_for(8, [&](size_t device) { fill(device); });   // blocks until all ran
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace meshlayout {

/// The environment variable that sets the threads of every pool made with the default size.
inline constexpr const char* kThreadsEnvVar = "MESHLAYOUT_THREADS";
inline constexpr size_t kMaxThreads = 1024;

/// MESHLAYOUT_THREADS, if set and not empty. \error ValueError naming the variable and its
/// text unless it is a count from 1 to kMaxThreads.
std::optional<size_t> thread_count_from_environment();
/// The CPUs this process may run on (sched_getaffinity), at least 1.
size_t available_cpus();
/// MESHLAYOUT_THREADS if set, else available_cpus().
size_t default_thread_count();

class ThreadPool {
 public:
  /// `threads` = 0 means default_thread_count(). The calling thread also works during
  /// parallel_for, so `threads - 1` workers are started.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  /// Runs fn(0) … fn(n-1), in parallel, and returns when all have finished. If any call
  /// throws, the first exception is rethrown here after the others finish.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

  /// Like parallel_for, but the calling thread first runs `first` (for work that must stay on
  /// the caller, such as an MPI call) while the workers start on the items; then it helps with
  /// the items. An exception from `first` or an item is rethrown after all have finished.
  void parallel_for_after(const std::function<void()>& first, size_t n,
                          const std::function<void(size_t)>& fn);

 private:
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), readable without mu_ (for polling)
  std::atomic<bool> stop_{false};
};

}  // namespace meshlayout
