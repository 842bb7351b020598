// fill_box throughput on a 64 MiB box, against std::fill of the same bytes measured in the
// same run (one thread each: fill_box is per device, the runtime runs devices in parallel).
//
// Counters: GBps (fill_box, 10^9 bytes/s, the unit of the 1 GB/s target), fill_GBps (std::fill
// of the same bytes), ratio = GBps / fill_GBps. The *Level benchmarks run the f32 uniform kernel
// at each SIMD level the CPU supports (the library picks the widest; CI machines may lack
// AVX-512). Run from a Release-like build (the default RelWithDebInfo; the init library adds
// -O3 itself).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "meshlayout/init/fill_kernels.h"
#include "meshlayout/init/initializers.h"

using namespace meshlayout;

namespace {

constexpr size_t kBoxBytes = size_t{64} << 20;

std::vector<std::byte>& buffer() {
  static std::vector<std::byte> b(kBoxBytes, std::byte{1});  // touched: no page faults timed
  return b;
}

// std::fill of `bytes` bytes, best of 3, in 10^9 bytes/s.
double std_fill_gbps(size_t bytes) {
  std::vector<std::byte>& b = buffer();
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    std::fill(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(bytes),
              std::byte{static_cast<unsigned char>(rep)});
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return static_cast<double>(bytes) / best / 1e9;
}

void report(benchmark::State& state, size_t bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  const double base = std_fill_gbps(bytes);
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["fill_GBps"] = base;
  state.counters["ratio"] = benchmark::Counter(static_cast<double>(bytes) / 1e9 / base,
                                               benchmark::Counter::kIsIterationInvariantRate);
}

// Rows [n/4, 3n/4) of an (n, 4096) tensor: 64 MiB in one run of global indices.
void fill_rows(benchmark::State& state, const Initializer& init, DType dtype) {
  const int64_t cols = 4096;
  const int64_t rows = static_cast<int64_t>(kBoxBytes / dtype_size(dtype)) / cols;
  const Shape shape{2 * rows, cols};
  const Box box{{rows / 2, 0}, {rows, cols}};
  const uint64_t key = variable_key("dense/kernel");
  for (auto _ : state) {
    fill_box(init, shape, box, dtype, buffer().data(), key);
    benchmark::DoNotOptimize(buffer().data());
    benchmark::ClobberMemory();
  }
  report(state, kBoxBytes);
}

void BM_F32Uniform(benchmark::State& s) {
  fill_rows(s, Initializer::random_uniform(), DType::kF32);
}
void BM_F32Normal(benchmark::State& s) { fill_rows(s, Initializer::random_normal(), DType::kF32); }
void BM_F32TruncatedNormal(benchmark::State& s) {
  fill_rows(s, Initializer::truncated_normal(), DType::kF32);
}
void BM_BF16Uniform(benchmark::State& s) {
  fill_rows(s, Initializer::random_uniform(), DType::kBF16);
}
void BM_F16Uniform(benchmark::State& s) {
  fill_rows(s, Initializer::random_uniform(), DType::kF16);
}
void BM_F64Uniform(benchmark::State& s) {
  fill_rows(s, Initializer::random_uniform(), DType::kF64);
}
void BM_F32GlorotUniform(benchmark::State& s) {
  fill_rows(s, Initializer::glorot_uniform(), DType::kF32);
}

// Columns [1024, 3072) of an (8192, 4096) f32 tensor: 64 MiB as 8192 runs of 2048 elements.
void BM_F32UniformColumnShard(benchmark::State& state) {
  const Shape shape{8192, 4096};
  const Box box{{0, 1024}, {8192, 2048}};
  for (auto _ : state) {
    fill_box(Initializer::random_uniform(), shape, box, DType::kF32, buffer().data(), 7);
    benchmark::DoNotOptimize(buffer().data());
    benchmark::ClobberMemory();
  }
  report(state, kBoxBytes);
}

void BM_StdFillBaseline(benchmark::State& state) {
  for (auto _ : state) {
    std::fill(buffer().begin(), buffer().end(), std::byte{3});
    benchmark::DoNotOptimize(buffer().data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBoxBytes));
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(kBoxBytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// The f32 uniform kernel at one SIMD level (the argument), on the same 64 MiB.
void BM_F32UniformLevel(benchmark::State& state) {
  const auto level = static_cast<internal_init::SimdLevel>(state.range(0));
  if (!internal_init::simd_level_supported(level)) {
    state.SkipWithError("SIMD level not supported by this CPU");
    return;
  }
  state.SetLabel(std::string(internal_init::simd_level_name(level)));
  const internal_init::SamplerSpec spec{.sampler = internal_init::Sampler::kUniform,
                                        .dtype = DType::kF32,
                                        .a = -0.05,
                                        .b = 0.05,
                                        .key = 7};
  for (auto _ : state) {
    internal_init::fill_run(level, spec, 0, kBoxBytes / 4, buffer().data());
    benchmark::DoNotOptimize(buffer().data());
    benchmark::ClobberMemory();
  }
  report(state, kBoxBytes);
}

}  // namespace

BENCHMARK(BM_StdFillBaseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32Uniform)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32Normal)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32TruncatedNormal)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BF16Uniform)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F16Uniform)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F64Uniform)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32GlorotUniform)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32UniformColumnShard)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_F32UniformLevel)
    ->Arg(static_cast<int>(internal_init::SimdLevel::kPortable))
    ->Arg(static_cast<int>(internal_init::SimdLevel::kSse2))
    ->Arg(static_cast<int>(internal_init::SimdLevel::kAvx2))
    ->Arg(static_cast<int>(internal_init::SimdLevel::kAvx512))
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
