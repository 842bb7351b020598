// test_util.h — helpers shared by the unit tests (test-only; never included by the library).
//
//   EXPECT_EQ(ValueErrorMessage([] { DeviceMesh({}, {}); }), "Shape and axis_names …");
//   EXPECT_TRUE(HasSubstr(text, "expected part"));
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <string_view>

#include "meshlayout/core/errors.h"

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

/// `text` contains `part`, with both shown on failure.
inline ::testing::AssertionResult HasSubstr(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

}  // namespace meshlayout::testing
