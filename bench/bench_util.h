// bench_util.h — what the benchmarks share (the CPU ones: llama_bench, llama_train_bench,
// moe_bench, checkpoint_bench, llama_fit_steps; the GPU ones: gpu_baselines, gpu_llama_bench,
// gpu_reshard_bench, gpu_checkpoint_bench): timing a call, the best and median of
// repetitions, and `--name value` arguments. Header-only and without meshlayout code, so a
// program of plain CUDA (gpu_baselines) includes it too.
//
// Example:
//   const int reps = bench::arg(argc, argv, "--reps", 5);
//   std::vector<double> t;
//   for (int r = 0; r < reps; ++r) t.push_back(bench::seconds([&] { run(); }));
//   fmt::print("best {:.3f} s, median {:.3f} s\n", bench::best(t), bench::median(t));
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bench {

/// Wall-clock seconds of f().
inline double seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

/// The median: the middle value, or the mean of the two middle ones for an even count.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The median of `reps` timed runs of fn(), each after an untimed before() (e.g. dropping a
/// file from the page cache).
inline double median_seconds(int reps, const std::function<void()>& before,
                             const std::function<void()>& fn) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    before();
    times.push_back(seconds(fn));
  }
  return median(std::move(times));
}

/// The integer after `name` on the command line, else `fallback`.
inline int arg(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

/// The word after `name` on the command line, else `fallback`.
inline std::string string_arg(int argc, char** argv, const std::string& name,
                              const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return fallback;
}

}  // namespace bench
