// gpu_reshard_bench — resharding on GPU devices against the GPU's own copy rate (issue 26): a
// 1 GiB F32 tensor on a 2×4 mesh of virtual GPU devices (MESHLAYOUT_GPU_DEVICES=8 over one GPU)
// moves between layouts by distribute_tensor; each case's time is compared with cudaMemcpyAsync
// device-to-device of the same bytes in the same run: the bytes the reshard copies (every piece
// of every destination shard: on virtual devices of one GPU a device's own piece is a copy too)
// and, stricter, the plan's bytes moved between devices.
// Median of 10 timed runs after 2 warm-ups, each ended by a stream synchronize. Prints one line
// per case `name ms GB/s baseline_ms ratio` (ratio = baseline time / reshard time; target ≥ 0.8)
// and --json FILE writes them. Prints "skipped: no GPU" and exits 0 without one.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/array/array.h"
#include "meshlayout/array/reshard_plan.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/device_memory.h"
#include "meshlayout/runtime/runtime.h"

using namespace meshlayout;

namespace {

using bench::median;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--json") json_path = argv[i + 1];
  }
  if (physical_gpu_count() == 0) {
    std::printf("skipped: no GPU\n");
    return 0;
  }
  setenv(kGpuDevicesEnvVar, "8", 1);
  auto rt = default_runtime(DeviceKind::kCuda);
  DeviceMemory& memory = rt->device(0).memory().device_memory();
  const DeviceMesh mesh = DeviceMesh({2, 4}, {"data", "model"}).with_device_kind(DeviceKind::kCuda);
  const int64_t n = 16384;  // 16384² F32 = 1 GiB
  const HostTensor x = HostTensor::random(DType::kF32, {n, n}, 1);
  using L = TensorLayout;
  struct Case {
    const char* name;
    L from, to;
  };
  const std::vector<Case> cases = {
      {"rows_to_columns", L({"model", std::nullopt}, mesh), L({std::nullopt, "model"}, mesh)},
      {"columns_to_rows", L({std::nullopt, "model"}, mesh), L({"model", std::nullopt}, mesh)},
      {"sharded_to_replicated", L({"model", "data"}, mesh), L({std::nullopt, std::nullopt}, mesh)},
      {"2d_transpose_axes", L({"data", "model"}, mesh), L({"model", "data"}, mesh)},
  };
  // Baseline buffers: the largest bytes any case moves.
  void* a = nullptr;
  void* b = nullptr;
  const size_t max_bytes = size_t{8} << 30;  // replicated: each of 8 devices gets 1 GiB minus own
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  const size_t base_bytes = std::min(max_bytes, free_bytes / 4);
  check(cudaMalloc(&a, base_bytes), "cudaMalloc");
  check(cudaMalloc(&b, base_bytes), "cudaMalloc");
  check(cudaMemset(a, 1, base_bytes), "cudaMemset");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto baseline_ms = [&](size_t bytes) {
    std::vector<double> t;
    for (int r = 0; r < 12; ++r) {
      size_t left = bytes;
      cudaEventRecord(e0, s);
      while (left > 0) {  // bytes over the buffer's size: copy it several times
        const size_t now = std::min(left, base_bytes);
        check(cudaMemcpyAsync(b, a, now, cudaMemcpyDeviceToDevice, s), "baseline copy");
        left -= now;
      }
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (r >= 2) t.push_back(ms);
    }
    return median(t);
  };
  std::string json = "{";
  std::printf("%-24s %10s %8s %12s %8s %14s %12s\n", "case", "ms", "GB/s", "copied_base", "ratio",
              "moved_base", "ratio_moved");
  for (const Case& c : cases) {
    Array src = distribute_tensor(x, c.from);
    std::vector<double> t;
    ReshardPlan plan;
    for (int r = 0; r < 12; ++r) {
      memory.synchronize();
      const auto start = std::chrono::steady_clock::now();
      Array dst = distribute_tensor(src, c.to, {.plan_out = &plan});
      memory.synchronize();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (r >= 2) t.push_back(ms);
      if (r == 0 && !(dst.gather() == x)) {
        std::fprintf(stderr, "%s: wrong result\n", c.name);
        return 1;
      }
    }
    const double ms = median(t);
    int64_t copied = 0;
    for (const Transfer& tr : plan.transfers) copied += tr.box.num_elements() * 4;
    const double base = baseline_ms(static_cast<size_t>(copied));
    const double base_moved = baseline_ms(static_cast<size_t>(plan.bytes_moved));
    const double gbs = 2.0 * static_cast<double>(copied) / (ms * 1e6);  // read + write
    std::printf("%-24s %10.3f %8.1f %12.3f %8.2f %14.3f %12.2f   (%lld copied, %lld moved)\n",
                c.name, ms, gbs, base, base / ms, base_moved, base_moved / ms,
                static_cast<long long>(copied), static_cast<long long>(plan.bytes_moved));
    json += std::string(json.size() > 1 ? ", " : "") + "\"" + c.name +
            "\": {\"ms\": " + std::to_string(ms) +
            ", \"copied_baseline_ms\": " + std::to_string(base) +
            ", \"ratio\": " + std::to_string(base / ms) +
            ", \"moved_baseline_ms\": " + std::to_string(base_moved) +
            ", \"ratio_moved\": " + std::to_string(base_moved / ms) +
            ", \"bytes_copied\": " + std::to_string(copied) +
            ", \"bytes_moved\": " + std::to_string(plan.bytes_moved) + "}";
  }
  json += "}";
  if (!json_path.empty()) std::ofstream(json_path) << json << "\n";
  return 0;
}
