// cuda_test_util.h — helpers for tests of CUDA kernel ops: shards whose bytes live in GPU memory
// (cudaMalloc'd, filled from and read back to host vectors) and host shards over vectors for the
// CPU implementation of the same op; MESHLAYOUT_REQUIRE_GPU (testing/test_util.h) skips a test
// where the process has no GPU (reported as skipped).
//
// Example:
//   MESHLAYOUT_REQUIRE_GPU();
//   std::vector<float> x = random_floats(64, /*seed=*/1);
//   GpuBlock gx(x);                                            // a copy in GPU memory
//   Array::Shard gpu = gx.shard(Box{{0, 0}, {8, 8}});           // on gpu:0
//   Array::Shard cpu = host_shard(x, Box{{0, 0}, {8, 8}});
//   … run the op for DeviceKind::kCpu on cpu and kCuda on gpu …
//   EXPECT_EQ(gx.download<float>(), x);
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "meshlayout/array/array.h"
#include "meshlayout/runtime/cuda/cuda_context.h"
#include "meshlayout/testing/test_util.h"  // MESHLAYOUT_REQUIRE_GPU

namespace meshlayout::testing_cuda {

/// A block of GPU memory holding a copy of host data (freed at destruction).
class GpuBlock {
 public:
  explicit GpuBlock(size_t bytes, int64_t device_id = 0) : bytes_(bytes), device_id_(device_id) {
    cuda::enter_device(device_id_);
    cuda::check(cudaMalloc(&data_, bytes_ == 0 ? 1 : bytes_), "test cudaMalloc", device_id_);
    // Poison: a kernel that leaves an element unwritten shows as NaN (0xFF bytes).
    cuda::check(cudaMemset(data_, 0xFF, bytes_), "test cudaMemset", device_id_);
    cuda::check(cudaDeviceSynchronize(), "test sync", device_id_);
  }
  template <typename T>
  explicit GpuBlock(const std::vector<T>& host, int64_t device_id = 0)
      : GpuBlock(host.size() * sizeof(T), device_id) {
    cuda::check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "test upload",
                device_id_);
  }
  GpuBlock(const GpuBlock&) = delete;
  GpuBlock& operator=(const GpuBlock&) = delete;
  ~GpuBlock() { cudaFree(data_); }

  std::byte* data() { return static_cast<std::byte*>(data_); }
  size_t bytes() const { return bytes_; }

  /// A shard of gpu:device_id over this block holding `box`.
  Array::Shard shard(Box box, int64_t position = 0) {
    return Array::Shard{position, device_id_, std::move(box),
                        DeviceBuffer::borrowed(data(), bytes_)};
  }

  /// The block's bytes as T (after every op enqueued on the device has finished).
  template <typename T>
  std::vector<T> download() {
    cuda::synchronize_device(device_id_);
    std::vector<T> out(bytes_ / sizeof(T));
    cuda::check(cudaMemcpy(out.data(), data_, out.size() * sizeof(T), cudaMemcpyDeviceToHost),
                "test download", device_id_);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
  int64_t device_id_;
};

/// A shard of cpu:0 over host data (the caller keeps `data` alive).
template <typename T>
Array::Shard host_shard(std::vector<T>& data, Box box, int64_t position = 0) {
  return Array::Shard{
      position, 0, std::move(box),
      DeviceBuffer::borrowed(reinterpret_cast<std::byte*>(data.data()), data.size() * sizeof(T))};
}

/// n values uniform in [lo, hi), reproducible from `seed`.
template <typename T = float>
std::vector<T> random_values(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(u(rng));
  return v;
}

/// ‖a − b‖ / ‖b‖ over doubles.
template <typename A, typename B>
double relative_error(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace meshlayout::testing_cuda
