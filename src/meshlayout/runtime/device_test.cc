#include "meshlayout/runtime/device.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace meshlayout {
namespace {

TEST(DeviceTest, BuffersChargeAndReleaseTheirAccount) {
  VirtualDevice dev(3);
  EXPECT_EQ(dev.name(), "cpu:3");
  {
    DeviceBuffer a(dev.memory(), 1000);
    DeviceBuffer b(dev.memory(), 24);
    EXPECT_EQ(dev.memory().stats().bytes_live, 1024);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    DeviceBuffer moved = std::move(a);
    EXPECT_EQ(dev.memory().stats().bytes_live, 1024);
    EXPECT_EQ(a.size(), 0u);
  }
  MemoryStats s = dev.memory().stats();
  EXPECT_EQ(s.bytes_live, 0);
  EXPECT_EQ(s.peak_bytes, 1024);
  EXPECT_EQ(s.allocations, 2);
  dev.memory().reset_peak();
  EXPECT_EQ(dev.memory().stats().peak_bytes, 0);
}

TEST(DeviceTest, ConcurrentChargesKeepAnExactPeakBound) {
  MemoryAccount account("test");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) DeviceBuffer b(account, 10);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(account.stats().bytes_live, 0);
  EXPECT_LE(account.stats().peak_bytes, 40);
  EXPECT_GE(account.stats().peak_bytes, 10);
  EXPECT_EQ(account.stats().allocations, 4000);
}

}  // namespace
}  // namespace meshlayout

namespace meshlayout {
namespace {

TEST(DeviceTest, FreedLargeBlocksAreCachedAndReused) {
  MemoryAccount account("cache", /*max_cached_bytes=*/int64_t{8} << 20);
  std::byte* first = nullptr;
  {
    DeviceBuffer b(account, 3 << 20);
    first = b.data();
    EXPECT_EQ(account.stats().bytes_cached, 0);
  }
  EXPECT_EQ(account.stats().bytes_live, 0);
  EXPECT_EQ(account.stats().bytes_cached, 4 << 20);  // rounded to 2 MiB pages
  {
    DeviceBuffer again(account, (3 << 20) + 100);  // same capacity class: reused
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(account.stats().bytes_cached, 0);
    EXPECT_EQ(account.stats().bytes_live, (3 << 20) + 100);
  }
  { DeviceBuffer big(account, 16 << 20); }  // over the cache limit: freed
  EXPECT_EQ(account.stats().bytes_cached, 4 << 20);
  account.release_cache();
  EXPECT_EQ(account.stats().bytes_cached, 0);
}

}  // namespace
}  // namespace meshlayout
