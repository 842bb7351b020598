#include "meshlayout/runtime/thread_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "meshlayout/core/errors.h"

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

namespace meshlayout {
namespace {

// Sets MESHLAYOUT_THREADS for one test and restores what was there.
class ThreadsVariable {
 public:
  explicit ThreadsVariable(const char* value) {
    if (const char* old = std::getenv(kThreadsEnvVar)) old_ = old;
    if (value) {
      ::setenv(kThreadsEnvVar, value, 1);
    } else {
      ::unsetenv(kThreadsEnvVar);
    }
  }
  ~ThreadsVariable() {
    if (old_) {
      ::setenv(kThreadsEnvVar, old_->c_str(), 1);
    } else {
      ::unsetenv(kThreadsEnvVar);
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(ThreadPoolSizeTest, DefaultIsTheCpusTheProcessMayRunOn) {
  ThreadsVariable unset(nullptr);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(available_cpus(), static_cast<size_t>(CPU_COUNT(&set)));
  EXPECT_EQ(ThreadPool().size(), available_cpus());
  EXPECT_EQ(ThreadPool(3).size(), 3u);  // an explicit size is kept
}

TEST(ThreadPoolSizeTest, EnvironmentVariableSetsTheDefault) {
  ThreadsVariable three("3");
  EXPECT_EQ(thread_count_from_environment(), 3u);
  EXPECT_EQ(ThreadPool().size(), 3u);
  EXPECT_EQ(ThreadPool(2).size(), 2u);
  ThreadsVariable empty("");
  EXPECT_EQ(thread_count_from_environment(), std::nullopt);
}

TEST(ThreadPoolSizeTest, BadEnvironmentValuesNameTheVariableAndTheText) {
  for (const char* bad : {"0", "-2", "1025", "two", "4x"}) {
    ThreadsVariable v(bad);
    try {
      ThreadPool pool;
      ADD_FAILURE() << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("MESHLAYOUT_THREADS")) << bad;
      EXPECT_THAT(e.what(), ::testing::HasSubstr(bad)) << bad;
    }
  }
}

}  // namespace
}  // namespace meshlayout
