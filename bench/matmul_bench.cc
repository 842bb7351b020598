// Sharded Dense-style forward y = x @ w on 8 virtual devices in one process, against raw
// cblas_sgemm on the same per-device shapes measured in the same run.
//
// Cases (mesh[x=8], K = N = 4096, B = batch rows):
//   Column: x (B, K) replicated,  w (K, N) layout[None,x]  -> y layout[None,x]; each device
//           multiplies (B x K) @ (K x N/8); no communication.
//   Row:    x (B, K) layout[None,x], w layout[x,None]     -> y replicated; each device
//           multiplies (B x K/8) @ (K/8 x N) into a partial sum, then the 8 partials are summed
//           (all-reduce in process) and every device gets the result.
//   RowScatter: as Row, but output_layout layout[x,None]: the partials are reduce-scattered.
//
// Baseline (fair by construction): the same 8 per-device cblas_sgemm calls, on the same shard
// buffers, with OpenBLAS at one thread per call, run with parallel_for on the same runtime
// thread pool (one task per device) — exactly the parallel decomposition matmul uses, without
// anything else (no output allocation, no reduction). Each iteration times one matmul and then
// one baseline run, so both see the same machine state (other jobs on the host); the counters
// use the best of the iterations, and ratio_median the medians.
// Extra reference (informational, not in the ratio): the same 8 calls in sequence with OpenBLAS
// multi-threaded over all cores (blas_mt_GFLOPs).
//
// Counters: GFLOPs (matmul, 2*B*K*N per call), sgemm_GFLOPs (baseline), ratio = baseline time /
// matmul time (target >= 0.9), ratio_median, blas_mt_GFLOPs. Time column: matmul, mean.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "meshlayout/array/array.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/matmul.h"

using namespace meshlayout;

namespace {

using bench::seconds;

constexpr int64_t kK = 4096, kN = 4096;

struct Call {  // one per-device sgemm: (m x k) @ (k x n)
  const float* a;
  const float* b;
  int m, n, k;
  std::vector<float>* c;
};

void sgemm(const Call& c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.m, c.n, c.k, 1.0f, c.a, c.k, c.b, c.n,
              0.0f, c.c->data(), c.n);
}

void run_case(benchmark::State& state, const char* x_layout, const char* w_layout,
              const char* out_layout) {
  set_device_count(8);
  static auto rt = Runtime::single_process(8);
  const int64_t batch = state.range(0);
  DeviceMesh mesh({8}, {"x"});
  Array x = distribute_tensor(HostTensor::random(DType::kF32, {batch, kK}, 1),
                              TensorLayout::from_string(x_layout).with_device_mesh(mesh),
                              {.runtime = rt});
  Array w = distribute_tensor(HostTensor::random(DType::kF32, {kK, kN}, 2),
                              TensorLayout::from_string(w_layout).with_device_mesh(mesh),
                              {.runtime = rt});
  MatmulOptions options;
  if (out_layout) options.output_layout = TensorLayout::from_string(out_layout);
  MatmulPlan plan;
  options.plan_out = &plan;
  { Array warm = matmul(x, w, options); }  // sets OpenBLAS to 1 thread; device blocks cached
  options.plan_out = nullptr;
  state.SetLabel(std::string(reduction_name(plan.reduction)));

  // Baseline: the same per-device calls on the same shards, into preallocated outputs.
  std::vector<std::vector<float>> outs(8);
  std::vector<Call> calls;
  for (size_t i = 0; i < 8; ++i) {
    const Array::Shard& xs = x.local_shards()[i];
    const Array::Shard& ws = w.local_shards()[i];
    const int m = static_cast<int>(xs.box.shape[0]), k = static_cast<int>(xs.box.shape[1]);
    const int n = static_cast<int>(ws.box.shape[1]);
    outs[i].assign(static_cast<size_t>(m) * static_cast<size_t>(n), 0.0f);
    calls.push_back(Call{reinterpret_cast<const float*>(xs.buffer.data()),
                         reinterpret_cast<const float*>(ws.buffer.data()), m, n, k, &outs[i]});
  }
  auto baseline = [&] {
    rt->pool().parallel_for(calls.size(), [&](size_t i) { sgemm(calls[i]); });
  };

  // matmul and the baseline alternate, so both see the same machine state; best of the runs.
  std::vector<double> mm, base;
  for (auto _ : state) {
    std::optional<Array> y;
    const double t = seconds([&] { y.emplace(matmul(x, w, options)); });
    benchmark::DoNotOptimize(y->local_shards().front().buffer.data());
    y.reset();  // freed outside the timed region
    base.push_back(seconds(baseline));
    mm.push_back(t);
    state.SetIterationTime(t);
  }
  openblas_set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  double mt_best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    mt_best = std::min(mt_best, seconds([&] {
                         for (const Call& c : calls) sgemm(c);
                       }));
  }
  openblas_set_num_threads(1);  // back to what matmul uses

  const double gflop = 2.0 * static_cast<double>(batch) * kK * kN / 1e9;
  const double best_mm = bench::best(mm);
  const double best_base = bench::best(base);
  state.counters["GFLOPs"] = gflop / best_mm;
  state.counters["sgemm_GFLOPs"] = gflop / best_base;
  state.counters["ratio"] = best_base / best_mm;
  state.counters["ratio_median"] = bench::median(base) / bench::median(mm);
  state.counters["blas_mt_GFLOPs"] = gflop / mt_best;
}

void BM_Column(benchmark::State& s) { run_case(s, "None,None", "None,x", nullptr); }
void BM_Row(benchmark::State& s) { run_case(s, "None,x", "x,None", nullptr); }
void BM_RowScatter(benchmark::State& s) { run_case(s, "None,x", "x,None", "x,None"); }

}  // namespace

// ratio: baseline time / matmul time, best of 8 alternating runs (>= 0.9 is the target).
BENCHMARK(BM_Column)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(8);
BENCHMARK(BM_Row)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(8);
BENCHMARK(BM_RowScatter)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->Iterations(8);
BENCHMARK_MAIN();
