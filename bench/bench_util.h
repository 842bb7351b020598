// bench_util.h — what the CPU model benchmarks share (llama_bench, llama_train_bench,
// moe_bench): timing a call, the best and median of repetitions, and `--name value` arguments.
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
#include <vector>

namespace bench {

/// Wall-clock seconds of f().
inline double seconds(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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
