#include "meshlayout/runtime/device_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/device.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
  return v;
}

TEST(DeviceMemoryTest, HostBlocksAreAlignedAndCopiesRoundTrip) {
  DeviceMemory& m = host_memory();
  EXPECT_EQ(m.name(), "host");
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{70000}, size_t{3} << 20}) {
    SCOPED_TRACE(bytes);
    std::byte* a = m.allocate(bytes);
    std::byte* b = m.allocate(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
    if (bytes >= (size_t{2} << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (2 << 20), 0u);
    }
    const std::vector<std::byte> in = pattern(bytes, 1);
    std::vector<std::byte> out(bytes);
    m.copy_from_host(a, in.data(), bytes);
    m.copy_on_device(b, a, bytes);
    m.copy_to_host(out.data(), b, bytes);
    EXPECT_EQ(out, in);
    m.free(a, bytes);
    m.free(b, bytes);
  }
}

// A (2, 3, 5)-element box of a (4, 6, 8) tensor of 4-byte elements at offset (1, 2, 3), copied
// into a dense buffer, then back into a zeroed (4, 6, 8) tensor: every element checked against
// the index arithmetic.
TEST(DeviceMemoryTest, StridedBoxCopiesMatchTheIndexArithmetic) {
  DeviceMemory& m = host_memory();
  constexpr int64_t kE = 4, D0 = 4, D1 = 6, D2 = 8, B0 = 2, B1 = 3, B2 = 5, O0 = 1, O1 = 2, O2 = 3;
  std::vector<int32_t> full(D0 * D1 * D2);
  std::iota(full.begin(), full.end(), 1000);
  std::vector<int32_t> box(B0 * B1 * B2, -1);
  const int64_t extent[] = {B0, B1};
  const int64_t full_stride[] = {D1 * D2 * kE, D2 * kE};
  const int64_t box_stride[] = {B1 * B2 * kE, B2 * kE};
  const auto* full_bytes = reinterpret_cast<const std::byte*>(full.data());
  const int64_t offset = ((O0 * D1 + O1) * D2 + O2) * kE;
  m.copy_strided({.dst = reinterpret_cast<std::byte*>(box.data()),
                  .src = full_bytes + offset,
                  .extent = extent,
                  .dst_stride = box_stride,
                  .src_stride = full_stride,
                  .run_bytes = B2 * kE});
  for (int64_t i = 0; i < B0; ++i) {
    for (int64_t j = 0; j < B1; ++j) {
      for (int64_t k = 0; k < B2; ++k) {
        ASSERT_EQ(box[(i * B1 + j) * B2 + k], full[((i + O0) * D1 + j + O1) * D2 + k + O2])
            << i << "," << j << "," << k;
      }
    }
  }
  std::vector<int32_t> back(full.size(), 0);
  m.copy_strided({.dst = reinterpret_cast<std::byte*>(back.data()) + offset,
                  .src = reinterpret_cast<const std::byte*>(box.data()),
                  .extent = extent,
                  .dst_stride = full_stride,
                  .src_stride = box_stride,
                  .run_bytes = B2 * kE});
  for (int64_t i = 0; i < D0; ++i) {
    for (int64_t j = 0; j < D1; ++j) {
      for (int64_t k = 0; k < D2; ++k) {
        const bool inside =
            i >= O0 && i < O0 + B0 && j >= O1 && j < O1 + B1 && k >= O2 && k < O2 + B2;
        const int32_t got = back[(i * D1 + j) * D2 + k];
        ASSERT_EQ(got, inside ? full[(i * D1 + j) * D2 + k] : 0) << i << "," << j << "," << k;
      }
    }
  }
}

TEST(DeviceMemoryTest, StridedCopyOfNoDimensionsIsOneRunAndEmptyExtentsCopyNothing) {
  DeviceMemory& m = host_memory();
  const std::vector<std::byte> in = pattern(12, 3);
  std::vector<std::byte> out(12);
  m.copy_strided({.dst = out.data(), .src = in.data(), .run_bytes = 12});
  EXPECT_EQ(out, in);
  std::vector<std::byte> untouched(12, std::byte{9});
  const int64_t extent[] = {3, 0}, stride[] = {4, 4};
  m.copy_strided({.dst = untouched.data(),
                  .src = in.data(),
                  .extent = extent,
                  .dst_stride = stride,
                  .src_stride = stride,
                  .run_bytes = 4});
  EXPECT_EQ(untouched, std::vector<std::byte>(12, std::byte{9}));
}

TEST(DeviceMemoryTest, StridedCopyRefusesMismatchedStridesAndNegativeExtents) {
  DeviceMemory& m = host_memory();
  std::byte buf[16] = {};
  const int64_t extent[] = {2, 2}, one[] = {8}, two[] = {8, 4}, negative[] = {2, -1};
  try {
    m.copy_strided({.dst = buf,
                    .src = buf,
                    .extent = extent,
                    .dst_stride = one,
                    .src_stride = two,
                    .run_bytes = 4});
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 extents, 1 dst strides, 2 src strides"));
  }
  try {
    m.copy_strided({.dst = buf,
                    .src = buf,
                    .extent = negative,
                    .dst_stride = two,
                    .src_stride = two,
                    .run_bytes = 4});
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("extent 1 is -1, expected >= 0"));
  }
}

// A device's DeviceBuffers (allocated through host_memory() by their account) hold what the
// memory's copies write, and a freed large block comes back from the account's cache.
TEST(DeviceMemoryTest, DeviceBuffersHoldTheHostMemorysCopiesAndReuseCachedBlocks) {
  VirtualDevice dev(2);
  const std::vector<std::byte> in = pattern(1 << 17, 5);
  std::byte* first = nullptr;
  {
    DeviceBuffer b(dev.memory(), in.size());
    host_memory().copy_from_host(b.data(), in.data(), in.size());
    std::vector<std::byte> out(in.size());
    host_memory().copy_to_host(out.data(), b.data(), out.size());
    EXPECT_EQ(out, in);
    first = b.data();
  }
  EXPECT_EQ(dev.memory().stats().bytes_cached, 1 << 17);
  DeviceBuffer again(dev.memory(), in.size());
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(dev.memory().stats().bytes_cached, 0);
}

}  // namespace
}  // namespace meshlayout
