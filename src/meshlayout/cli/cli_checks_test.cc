#include "meshlayout/cli/cli_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "meshlayout/cli/match_command.h"
#include "meshlayout/core/errors.h"

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;

// --seed -1 and --seed 18446744073709551616 used to wrap around silently.
TEST(CliChecksTest, Uint64TextRefusesSignsAndOverflow) {
  CLI::App app;
  uint64_t seed = 1;
  app.add_option("--seed", seed)->check(kUint64Text);
  auto parse = [&](std::vector<std::string> args) -> std::string {
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    try {
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "ok";
  };
  EXPECT_EQ(parse({"--seed", "18446744073709551615"}), "ok");
  EXPECT_EQ(seed, UINT64_MAX);
  EXPECT_EQ(parse({"--seed=-1"}),
            "--seed: must be a whole number from 0 to 18446744073709551615, got '-1'");
  EXPECT_THAT(parse({"--seed", "18446744073709551616"}),
              HasSubstr("got '18446744073709551616'"));
  EXPECT_THAT(parse({"--seed", "0x10"}), HasSubstr("must be a whole number"));
  EXPECT_THAT(parse({"--seed", "+5"}), HasSubstr("must be a whole number"));
}

// "A subcommand is required" was all CLI11 said.
TEST(CliChecksTest, UnknownSubcommandIsNamedWithTheList) {
  CLI::App app;
  app.add_subcommand("match", "");
  app.add_subcommand("inspect", "");
  const char* bad[] = {"meshlayout", "matc", "--rules", "x"};
  EXPECT_EQ(unknown_subcommand(app, 4, bad),
            "unknown subcommand 'matc'; expected one of: match, inspect (see --help)");
  const char* good[] = {"meshlayout", "inspect", "x"};
  EXPECT_EQ(unknown_subcommand(app, 3, good), std::nullopt);
  const char* help[] = {"meshlayout", "--help"};
  EXPECT_EQ(unknown_subcommand(app, 2, help), std::nullopt);
  EXPECT_EQ(unknown_subcommand(app, 1, help), std::nullopt);
}

TEST(CliChecksTest, BadStreamIsAReadError) {
  std::istringstream in("a\n");
  in.setstate(std::ios::badbit);
  EXPECT_THROW(check_read(in, "paths"), ValueError);
  std::istringstream fine("a\n");
  for (std::string line; std::getline(fine, line);) {
  }
  EXPECT_NO_THROW(check_read(fine, "paths"));
}

// Runs `match` with stdin replaced by `stdin_path`; exits 1 printing the ValueError, else 0.
[[noreturn]] void match_with_stdin(const std::string& rules, const char* stdin_path) {
  if (std::freopen(stdin_path, "r", stdin) == nullptr) std::_Exit(3);
  std::ostringstream out;
  std::ostringstream err;
  try {
    run_match({.rules_path = rules}, std::cin, out, err);
  } catch (const ValueError& e) {
    std::cerr << e.what();
    std::_Exit(1);
  }
  std::_Exit(0);
}

// `meshlayout match < /` printed nothing and exited 0. In a child process (stdin replaced).
TEST(CliChecksDeathTest, StdinThatIsADirectoryFailsMatch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string rules = ::testing::TempDir() + "cli_checks_rules_" + std::to_string(getpid());
  std::ofstream(rules) << R"({"rules": [["a", [null]]]})";
  EXPECT_EXIT(match_with_stdin(rules, "/"), ::testing::ExitedWithCode(1),
              "cannot read the paths on standard input: standard input is a directory");
  std::remove(rules.c_str());
}

}  // namespace
}  // namespace meshlayout::cli
