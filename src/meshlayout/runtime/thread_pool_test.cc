#include "meshlayout/runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
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

// Calls in quick succession find the workers polling; calls after a pause find them asleep
// (past the polling window). Both must run every item exactly once and see the caller's writes.
TEST(ThreadPoolTest, BackToBackAndPausedCallsRunEveryItemOnce) {
  ThreadPool pool(3);
  std::vector<int> values(64, 0);
  for (int call = 0; call < 400; ++call) {
    const int expected = call;
    pool.parallel_for(values.size(), [&](size_t i) {
      EXPECT_EQ(values[i], expected) << "item " << i << " of call " << call;
      values[i] = expected + 1;
    });
    if (call % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int v : values) EXPECT_EQ(v, 400);
}

}  // namespace
}  // namespace meshlayout
