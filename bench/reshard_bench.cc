// Reshard throughput in one process on 8 virtual devices, against memcpy of the same bytes
// measured in the same run. The reshard copies `bytes moved + bytes kept` (data already on its
// device is still copied into the new target shard), so that is the byte count compared.
//
// Counters: GiBps (reshard), memcpy_GiBps (one thread copying the same bytes),
// ratio = GiBps / memcpy_GiBps, moved_MiB, minimum_MiB.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/layout/devices.h"

using namespace meshlayout;

namespace {

double memcpy_gibps(int64_t bytes) {
  // Copy `bytes` as 4 MiB-or-larger chunks between two 64 MiB buffers; best of 3.
  const size_t chunk = 64u << 20;
  static std::vector<char> a(chunk, 1), b(chunk, 2);
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = std::chrono::steady_clock::now();
    int64_t left = bytes;
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(chunk)));
      std::memcpy(b.data(), a.data(), n);
      benchmark::DoNotOptimize(b.data());
      left -= static_cast<int64_t>(n);
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return static_cast<double>(bytes) / best / (1 << 30);
}

void run_case(benchmark::State& state, Shape shape, const char* mesh_text, const char* from,
              const char* to) {
  set_device_count(8);
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
  HostTensor x = HostTensor::random(DType::kF32, shape, 1);
  Array a =
      distribute_tensor(x, TensorLayout::from_string(from).with_device_mesh(mesh), {.runtime = rt});
  TensorLayout target = TensorLayout::from_string(to).with_device_mesh(mesh);
  ReshardPlan plan = plan_distribute(a, target);
  const int64_t copied = plan.bytes_moved + plan.bytes_kept;
  { Array warm = distribute_tensor(a, target); }  // steady state: device blocks are cached
  for (auto _ : state) {
    Array b = distribute_tensor(a, target);
    benchmark::DoNotOptimize(b.local_shards().front().buffer.data());
    state.PauseTiming();
    { Array drop = std::move(b); }  // free outside the timed region
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * copied);
  const double base = memcpy_gibps(copied);
  state.counters["memcpy_GiBps"] = base;
  state.counters["moved_MiB"] = static_cast<double>(plan.bytes_moved) / (1 << 20);
  state.counters["minimum_MiB"] = static_cast<double>(plan.minimum_bytes) / (1 << 20);
  state.counters["copied_MiB"] = static_cast<double>(copied) / (1 << 20);
  state.counters["ratio"] = benchmark::Counter(static_cast<double>(copied) / (1 << 30) / base,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// 64 MiB f32 tensors (4096 x 4096) unless said otherwise.
void BM_ReplicatedToSharded(benchmark::State& s) {
  run_case(s, {4096, 4096}, "mesh[data=2,model=4]", "None,None", "data,model");
}
void BM_ShardedToReplicated(benchmark::State& s) {
  run_case(s, {4096, 4096}, "mesh[x=8]", "x,None", "None,None");
}
void BM_RowsToColumns(benchmark::State& s) {
  run_case(s, {4096, 4096}, "mesh[x=8]", "x,None", "None,x");
}
void BM_RowsToColumns256MiB(benchmark::State& s) {
  run_case(s, {8192, 8192}, "mesh[x=8]", "x,None", "None,x");
}
void BM_MeshTranspose2D(benchmark::State& s) {
  run_case(s, {4096, 4096}, "mesh[data=2,model=4]", "data,model", "model,data");
}
void BM_Uneven(benchmark::State& s) { run_case(s, {4099, 4097}, "mesh[x=8]", "x,None", "None,x"); }

}  // namespace

// ratio: reshard bytes/s divided by memcpy bytes/s of the same bytes (>= 0.7 is the target).
BENCHMARK(BM_ReplicatedToSharded)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ShardedToReplicated)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RowsToColumns)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RowsToColumns256MiB)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MeshTranspose2D)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Uneven)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
