// gpu_bench_util.h — what the GPU benchmarks of plain CUDA and cuBLAS calls share
// (gpu_baselines, gpu_llama_bench): the figures they report, exiting on a CUDA or cuBLAS error
// with the program's name, timing runs with CUDA events, and the JSON file of the figures.
// Header-only, no meshlayout code; the median is bench_util.h's.
//
// Example:
//   std::vector<gpu_bench::Figure> figures;
//   const std::vector<double> t = gpu_bench::time_runs(stream, 2, 20, [&] { copy(); });
//   figures.push_back({"d2d_copy_bandwidth", bytes / bench::median(t) / 1e9, "GB/s"});
//   gpu_bench::write_json("/tmp/figures.json", figures, prop.name, "");
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace gpu_bench {

/// One measured figure: `name value unit` on stdout, an entry of the JSON file.
struct Figure {
  std::string name;
  double value;
  std::string unit;
};

/// Exits 1 naming the program, `what` and the CUDA error unless `status` is cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s: %s (%s)\n", program_invocation_short_name, what,
               cudaGetErrorString(status), cudaGetErrorName(status));
  std::exit(1);
}

/// Exits 1 naming the program, `what` and the cuBLAS status unless it is a success.
inline void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
               cublasGetStatusString(status));
  std::exit(1);
}

/// Seconds of each of `timed` runs of `op` (enqueued on `s`) after `warmup` untimed ones.
template <typename Op>
std::vector<double> time_runs(cudaStream_t s, int warmup, int timed, Op op) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) op();
  check(cudaStreamSynchronize(s), "warm-up");
  std::vector<double> seconds;
  for (int i = 0; i < timed; ++i) {
    check(cudaEventRecord(start, s), "cudaEventRecord");
    op();
    check(cudaEventRecord(stop, s), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return seconds;
}

/// Writes {"device": …, [each of `numbers`,] ["skipped": …,] "<figure>": {"value", "unit"} …}
/// to `path`; exits 1 naming the path if it cannot be written.
inline void write_json(const std::string& path, const std::vector<Figure>& figures,
                       const std::string& device, const std::string& skipped,
                       const std::vector<std::pair<std::string, int64_t>>& numbers = {}) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", program_invocation_short_name, path.c_str(),
                 std::strerror(errno));
    std::exit(1);
  }
  std::fprintf(f, "{\n  \"device\": \"%s\"", device.c_str());
  for (const auto& [name, value] : numbers) {
    std::fprintf(f, ",\n  \"%s\": %lld", name.c_str(), static_cast<long long>(value));
  }
  if (!skipped.empty()) std::fprintf(f, ",\n  \"skipped\": \"%s\"", skipped.c_str());
  for (const Figure& fig : figures) {
    std::fprintf(f, ",\n  \"%s\": {\"value\": %.6g, \"unit\": \"%s\"}", fig.name.c_str(), fig.value,
                 fig.unit.c_str());
  }
  std::fprintf(f, "\n}\n");
  std::fclose(f);
}

}  // namespace gpu_bench
