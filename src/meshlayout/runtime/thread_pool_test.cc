#include "meshlayout/runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

namespace meshlayout {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(100);
  pool.parallel_for(100, [&](size_t i) { hits[i]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  pool.parallel_for(0, [](size_t) { FAIL(); });
}

TEST(ThreadPoolTest, RethrowsTheFirstErrorAfterAllFinish) {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(10,
                                 [&](size_t i) {
                                   ran++;
                                   if (i == 3) throw std::runtime_error("boom at 3");
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 10);
}

TEST(ThreadPoolTest, NestedCallsDoNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.parallel_for(4, [&](size_t) { pool.parallel_for(4, [&](size_t) { total++; }); });
  EXPECT_EQ(total.load(), 16);
}

}  // namespace
}  // namespace meshlayout
