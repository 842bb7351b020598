#include "meshlayout/cli/match_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

class MatchCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    // Unique per test and process: ctest runs the tests of this file in parallel.
    path_ = ::testing::TempDir() + "match_rules_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(getpid()) + ".json";
    std::ofstream(path_) << R"({"mesh": {"shape": [2, 4], "axis_names": ["data", "model"]},
      "mode": "search",
      "rules": [["dense.*kernel", [null, "model"]], ["emb", [["data", "model"], null]],
                [".*bias", ["model"]], ["dense_9/bias", ["data"]]]})";
  }
  void TearDown() override {
    std::remove(path_.c_str());
    reset_device_count();
  }
  std::string path_;
};

TEST_F(MatchCommandTest, PrintsOneJsonObjectPerPath) {
  std::istringstream in("my/dense_1/kernel\nemb/embeddings\nconv/kernel\ndense_9/bias\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_match({.rules_path = path_}, in, out, err), 0);
  EXPECT_EQ(out.str(),
            "{\"path\":\"my/dense_1/kernel\",\"rule\":0,\"pattern\":\"dense.*kernel\","
            "\"layout\":[null,\"model\"]}\n"
            "{\"path\":\"emb/embeddings\",\"rule\":1,\"pattern\":\"emb\","
            "\"layout\":[[\"data\",\"model\"],null]}\n"
            "{\"path\":\"conv/kernel\",\"rule\":null,\"pattern\":null,\"layout\":null}\n"
            "{\"path\":\"dense_9/bias\",\"rule\":3,\"pattern\":\"dense_9/bias\","
            "\"layout\":[\"data\"]}\n");
  EXPECT_EQ(err.str(), "");
}

TEST_F(MatchCommandTest, AmbiguousPathGetsAnErrorLine) {
  std::istringstream in("dense_1/kernel_bias\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_match({.rules_path = path_}, in, out, err), 0);
  EXPECT_EQ(out.str(),
            "{\"path\":\"dense_1/kernel_bias\",\"error\":\"Path 'dense_1/kernel_bias' matches "
            "multiple layout specification keys: ['dense.*kernel', '.*bias']. Please make sure "
            "each tensor/variable path only matches at most one layout specification key in the "
            "LayoutMap.\"}\n");
}

TEST_F(MatchCommandTest, ModeOverridesTheFile) {
  std::istringstream in("dense_1/kernel_bias\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_match({.rules_path = path_, .mode = "first"}, in, out, err), 0);
  EXPECT_THAT(out.str(), HasSubstr("\"rule\":0"));
  std::istringstream in2("x\n");
  EXPECT_THROW(run_match({.rules_path = path_, .mode = "regex"}, in2, out, err), ValueError);
}

TEST_F(MatchCommandTest, StatsLineGoesToStderr) {
  std::istringstream in("a\nb\nc\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_match({.rules_path = path_, .stats = true}, in, out, err), 0);
  EXPECT_THAT(err.str(), MatchesRegex("lookups=3 seconds=[0-9.]+ lookups_per_s=[0-9]+\n"));
}

TEST_F(MatchCommandTest, ExplainAndWarnUnused) {
  std::istringstream in("dense_1/kernel_bias\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_match({.rules_path = path_, .explain = true, .warn_unused = true}, in, out, err),
            0);
  EXPECT_THAT(out.str(), HasSubstr("verdict: ambiguous: 2 rules match"));
  EXPECT_EQ(err.str(),
            "warning: rule 1 (\"emb\") matches none of the 1 paths\n"
            "warning: rule 3 (\"dense_9/bias\") matches none of the 1 paths\n");
}

// Output hygiene: every line is valid UTF-8 JSON whatever bytes the path holds, and --explain
// prints control characters escaped.
TEST_F(MatchCommandTest, InvalidUtf8AndControlsInPathsStayValidOutput) {
  const std::string bad = "emb/\xff\xfe\x1b[2J";
  std::istringstream in(bad + "\n" + "dense_1/kernel_bias\xc3\n");
  std::ostringstream out, err;
  EXPECT_EQ(run_match({.rules_path = path_}, in, out, err), 0);
  std::istringstream lines(out.str());
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line);  // throws on invalid UTF-8
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
    if (n == 1) {
      EXPECT_THAT(j["error"].get<std::string>(), HasSubstr("'dense_1/kernel_bias\\xc3'"));
    }
  }
  EXPECT_EQ(n, 2);
  std::istringstream in2(bad + "\n");
  std::ostringstream explained;
  EXPECT_EQ(run_match({.rules_path = path_, .explain = true}, in2, explained, err), 0);
  EXPECT_EQ(explained.str().find('\x1b'), std::string::npos) << explained.str();
  EXPECT_EQ(explained.str().find('\xff'), std::string::npos) << explained.str();
}

TEST_F(MatchCommandTest, MissingRulesFile) {
  std::istringstream in("a\n");
  std::ostringstream out, err;
  EXPECT_THROW(run_match({.rules_path = "/nonexistent.json"}, in, out, err), NotFoundError);
}

}  // namespace
}  // namespace meshlayout::cli
