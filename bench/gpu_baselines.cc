// gpu_baselines.cc — what the GPU itself can do, measured with the CUDA runtime and cuBLAS
// alone (no meshlayout code): the ceilings the CUDA device kind's copies, uploads and matrix
// products are compared against. Built only with -DMESHLAYOUT_CUDA=ON; a plain program.
//
// Figures (one line each on stdout, `name value unit`; the device's name goes to stderr):
//   d2d_copy_bandwidth        device-to-device cudaMemcpyAsync of 1 GiB, GB/s counting the
//                             bytes read and written (2 GiB per copy)
//   h2d_pageable_bandwidth    host-to-device cudaMemcpyAsync of 1 GiB from malloc'd memory
//   h2d_pinned_bandwidth      the same from cudaMallocHost memory
//   gemm_bf16_tflops          cublasGemmEx 8192³, BF16 operands and output, F32 accumulation
//   gemm_f32_tflops           cublasSgemm 8192³ (CUBLAS_DEFAULT_MATH: no TF32)
// Each is the median of 20 timed runs (10 for the products) after warm-up runs, timed with
// CUDA events on one stream; the matrices hold uniform random values in [-1, 1).
// Without a GPU it prints "skipped: no GPU (…)" and exits 0 (the JSON file says the same).
//
// Example:
//   build-cuda/bench/gpu_baselines --json /tmp/gpu_baselines.json
//   d2d_copy_bandwidth 2987.1 GB/s
//   …
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "gpu_bench_util.h"

namespace {

using bench::median;
using gpu_bench::check;
using gpu_bench::Figure;
using gpu_bench::time_runs;
using gpu_bench::write_json;

// Uniform values in [-1, 1) from a 64-bit LCG (fast; the products only need non-trivial data).
void fill_random(float* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<int32_t>(x >> 40) - (1 << 23)) * 0x1p-23f;
  }
}

uint16_t bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    const std::string why = status != cudaSuccess ? cudaGetErrorString(status)
                                                  : std::string("the driver reports no device");
    std::printf("skipped: no GPU (%s)\n", why.c_str());
    if (!json.empty()) write_json(json, {}, "", "no GPU: " + why);
    return 0;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::fprintf(stderr, "device 0: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
               static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<Figure> figures;
  auto report = [&](const std::string& name, double value, const std::string& unit) {
    std::printf("%s %.1f %s\n", name.c_str(), value, unit.c_str());
    std::fflush(stdout);
    figures.push_back({name, value, unit});
  };

  // ---- Copies of 1 GiB ----
  constexpr size_t kBytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, kBytes), "cudaMalloc");
  check(cudaMalloc(&b, kBytes), "cudaMalloc");
  check(cudaMemsetAsync(a, 1, kBytes, s), "cudaMemset");
  std::vector<double> t = time_runs(s, 3, 20, [&] {
    check(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, s), "d2d copy");
  });
  report("d2d_copy_bandwidth", 2.0 * kBytes / median(t) / 1e9, "GB/s");

  std::vector<char> pageable(kBytes);
  std::memset(pageable.data(), 1, kBytes);  // touched: its pages exist
  t = time_runs(s, 2, 20, [&] {
    check(cudaMemcpyAsync(a, pageable.data(), kBytes, cudaMemcpyHostToDevice, s), "h2d pageable");
  });
  report("h2d_pageable_bandwidth", kBytes / median(t) / 1e9, "GB/s");
  pageable = std::vector<char>();

  void* pinned = nullptr;
  check(cudaMallocHost(&pinned, kBytes), "cudaMallocHost");
  std::memset(pinned, 1, kBytes);
  t = time_runs(s, 2, 20, [&] {
    check(cudaMemcpyAsync(a, pinned, kBytes, cudaMemcpyHostToDevice, s), "h2d pinned");
  });
  report("h2d_pinned_bandwidth", kBytes / median(t) / 1e9, "GB/s");
  check(cudaFreeHost(pinned), "cudaFreeHost");
  check(cudaFree(a), "cudaFree");
  check(cudaFree(b), "cudaFree");

  // ---- 8192³ products ----
  constexpr int kN = 8192;
  constexpr size_t kElems = size_t{kN} * kN;
  const double flops = 2.0 * kN * kN * double{kN};
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  check(cublasSetStream(h, s), "cublasSetStream");
  check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  std::vector<float> host_a(kElems), host_b(kElems);
  fill_random(host_a.data(), kElems, 1);
  fill_random(host_b.data(), kElems, 2);
  {
    std::vector<uint16_t> ha(kElems), hb(kElems);
    for (size_t i = 0; i < kElems; ++i) ha[i] = bf16_bits(host_a[i]), hb[i] = bf16_bits(host_b[i]);
    void *da, *db, *dc;
    check(cudaMalloc(&da, kElems * 2), "cudaMalloc");
    check(cudaMalloc(&db, kElems * 2), "cudaMalloc");
    check(cudaMalloc(&dc, kElems * 2), "cudaMalloc");
    check(cudaMemcpy(da, ha.data(), kElems * 2, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(db, hb.data(), kElems * 2, cudaMemcpyHostToDevice), "upload");
    const float one = 1, zero = 0;
    t = time_runs(s, 3, 10, [&] {
      check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, da, CUDA_R_16BF, kN, db,
                         CUDA_R_16BF, kN, &zero, dc, CUDA_R_16BF, kN, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    });
    report("gemm_bf16_tflops", flops / median(t) / 1e12, "TFLOP/s");
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  {
    void *da, *db, *dc;
    check(cudaMalloc(&da, kElems * 4), "cudaMalloc");
    check(cudaMalloc(&db, kElems * 4), "cudaMalloc");
    check(cudaMalloc(&dc, kElems * 4), "cudaMalloc");
    check(cudaMemcpy(da, host_a.data(), kElems * 4, cudaMemcpyHostToDevice), "upload");
    check(cudaMemcpy(db, host_b.data(), kElems * 4, cudaMemcpyHostToDevice), "upload");
    const float one = 1, zero = 0;
    t = time_runs(s, 2, 10, [&] {
      check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, kN, kN, kN, &one, static_cast<float*>(da), kN,
                        static_cast<float*>(db), kN, &zero, static_cast<float*>(dc), kN),
            "cublasSgemm");
    });
    report("gemm_f32_tflops", flops / median(t) / 1e12, "TFLOP/s");
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
  }
  cublasDestroy(h);
  cudaStreamDestroy(s);
  if (!json.empty()) write_json(json, figures, prop.name, "");
  return 0;
}
