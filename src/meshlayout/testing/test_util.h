// test_util.h — helpers shared by the unit tests (test-only; never included by the library).
//
//   EXPECT_EQ(ValueErrorMessage([] { DeviceMesh({}, {}); }), "Shape and axis_names …");
//   EXPECT_TRUE(HasSubstr(text, "expected part"));
//   MESHLAYOUT_REQUIRE_GPU();   // first in a GPU test: skipped where there is no GPU
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

/// Skips the current test (reported as skipped, not passed) when this process sees no GPU:
/// a build without -DMESHLAYOUT_CUDA=ON, or a machine without one (physical_gpu_count(),
/// layout/devices.h). In a test body or a fixture's SetUp.
#define MESHLAYOUT_REQUIRE_GPU()                                                 \
  do {                                                                           \
    if (::meshlayout::physical_gpu_count() == 0) {                               \
      GTEST_SKIP() << "no GPU in this process (no CUDA GPU, or a build without " \
                      "-DMESHLAYOUT_CUDA=ON)";                                   \
    }                                                                            \
  } while (0)

namespace meshlayout::testing {

/// Runs `f` and returns the message of the ValueError it throws. Anything else yields a
/// text that no expectation matches, so the calling EXPECT_* fails at the caller's line.
template <typename F>
std::string ValueErrorMessage(F&& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a ValueError: ") + e.what() + ">";
  }
  return "<nothing thrown>";
}

/// Runs `f` and returns the message of the meshlayout Error (of any kind) it throws, else
/// "(no error)".
template <typename F>
std::string ErrorMessage(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// `text` contains `part`, with both shown on failure.
inline ::testing::AssertionResult HasSubstr(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

/// MESHLAYOUT_TEST_SEED if set, else `fallback`; printed so a failure can be replayed.
inline uint64_t test_seed(uint64_t fallback) {
  const char* env = std::getenv("MESHLAYOUT_TEST_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : fallback;
  std::printf("[ seed     ] MESHLAYOUT_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

/// xorshift64 for property tests: small, deterministic across platforms.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  /// In [0, n), n > 0.
  int64_t uniform(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  size_t index(size_t n) { return static_cast<size_t>(next() % n); }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[index(v.size())];
  }

 private:
  uint64_t state_;
};

}  // namespace meshlayout::testing
