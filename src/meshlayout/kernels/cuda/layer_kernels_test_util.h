// layer_kernels_test_util.h — comparisons the tests of the CUDA layer kernels share
// (layer_kernels_test.cc, attention_kernels_test.cc, cross_entropy_kernels_test.cc): the dtype
// and tolerance of an element type, and expectations that a GPU result matches the CPU op's on the
// same inputs — every element written (GpuBlock poisons with NaN), within a relative tolerance,
// or bit for bit.
//
// Example:
//   expect_near_cpu(gy.download<float>(), cpu_y, tolerance<float>(), "rms_norm 7x13");
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/kernels/cuda/cuda_test_util.h"

namespace meshlayout::testing_cuda {

template <typename E>
constexpr DType dtype_of() {
  return sizeof(E) == 4 ? DType::kF32 : DType::kF64;
}

/// The brief's bounds for reductions and transcendental functions: 1e-6 (F32), 1e-12 (F64).
template <typename E>
constexpr double tolerance() {
  return sizeof(E) == 4 ? 1e-6 : 1e-12;
}

/// Elements not finite on one side that are not the same on the other (NaN on both sides, or
/// the same infinity, match): never written (GpuBlock's NaN poison) or wrongly computed.
template <typename E>
int64_t non_finite_mismatches(const std::vector<E>& gpu, const std::vector<E>& cpu) {
  int64_t n = 0;
  for (size_t i = 0; i < gpu.size() && i < cpu.size(); ++i) {
    const double g = static_cast<double>(gpu[i]), c = static_cast<double>(cpu[i]);
    if (std::isfinite(g) && std::isfinite(c)) continue;
    if (!((std::isnan(g) && std::isnan(c)) || g == c)) ++n;
  }
  return n;
}

/// The GPU's values are the CPU's within `tol` (‖gpu − cpu‖/‖cpu‖ over the elements finite on
/// both sides), the non-finite ones the same, every element written.
template <typename E>
void expect_near_cpu(const std::vector<E>& gpu, const std::vector<E>& cpu, double tol,
                     const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  EXPECT_EQ(non_finite_mismatches(gpu, cpu), 0) << what << ": non-finite on one side only";
  double worst = 0, num = 0, den = 0;
  size_t at = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double g = static_cast<double>(gpu[i]), c = static_cast<double>(cpu[i]);
    if (!std::isfinite(g) || !std::isfinite(c)) continue;
    const double d = std::abs(g - c);
    num += d * d;
    den += c * c;
    if (d > worst) {
      worst = d;
      at = i;
    }
  }
  const double rel = den == 0 ? std::sqrt(num) : std::sqrt(num / den);
  EXPECT_LE(rel, tol) << what << ": largest difference " << worst << " at element " << at
                      << " (gpu " << (gpu.empty() ? 0.0 : double(gpu[at])) << ", cpu "
                      << (cpu.empty() ? 0.0 : double(cpu[at])) << ")";
}

/// The GPU's values are the CPU's bit for bit.
template <typename E>
void expect_bits_equal(const std::vector<E>& gpu, const std::vector<E>& cpu,
                       const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  int64_t differ = 0;
  size_t first = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::memcmp(&gpu[i], &cpu[i], sizeof(E)) != 0) {
      if (differ++ == 0) first = i;
    }
  }
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << gpu.size()
                       << " elements differ, the first at " << first << " (gpu "
                       << double(gpu[first]) << ", cpu " << double(cpu[first]) << ")";
}

}  // namespace meshlayout::testing_cuda
