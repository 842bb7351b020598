#include "meshlayout/cli/progress_bar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <thread>
#include <vector>

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ProgressBarTest, RendersFractionBytesAndRate) {
  EXPECT_EQ(ProgressBar::render("saving", 512 << 20, 1 << 30, 0.5, 10),
            "saving [#####.....]  50%  512.0 MiB / 1.0 GiB  1.0 GiB/s");
  EXPECT_EQ(ProgressBar::render("loading", 0, 0, 0, 4), "loading [####] 100%  0 B / 0 B");
  // Past the total (a caller's rounding) never overflows the bar.
  EXPECT_THAT(ProgressBar::render("x", 30, 20, 0, 4), StartsWith("x [####] 100%"));
}

TEST(ProgressBarTest, DisabledPrintsNothing) {
  std::ostringstream out;
  ProgressBar bar(out, "loading", /*enabled=*/false);
  bar.update(1, 2);
  bar.update(2, 2);
  bar.finish();
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBarTest, RedrawsInPlaceAtMostEveryIntervalAndAlwaysAtTheEnd) {
  std::ostringstream out;
  ProgressBar bar(out, "loading", /*enabled=*/true, std::chrono::hours(1));
  bar.update(1, 10);   // first: drawn
  bar.update(5, 10);   // within the interval: skipped
  bar.update(10, 10);  // done: drawn
  bar.finish();
  bar.finish();  // idempotent
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 2);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_THAT(text, HasSubstr("  10%"));
  EXPECT_THAT(text, Not(HasSubstr("  50%")));
  EXPECT_THAT(text, HasSubstr("100%"));
}

TEST(ProgressBarTest, ConcurrentUpdatesAreSerialised) {
  std::ostringstream out;
  ProgressBar bar(out, "x", /*enabled=*/true, std::chrono::nanoseconds(0));
  auto update = bar.callback();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&update] {
      for (int i = 0; i < 200; ++i) update(static_cast<uint64_t>(i), 1000);
    });
  }
  for (std::thread& t : threads) t.join();
  bar.finish();
  const std::string text = out.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 800);  // every line whole
}

}  // namespace
}  // namespace meshlayout::cli
