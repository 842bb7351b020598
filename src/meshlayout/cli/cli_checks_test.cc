#include "meshlayout/cli/cli_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
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
  EXPECT_THAT(parse({"--seed", "18446744073709551616"}), HasSubstr("got '18446744073709551616'"));
  EXPECT_THAT(parse({"--seed", "0x10"}), HasSubstr("must be a whole number"));
  EXPECT_THAT(parse({"--seed", "+5"}), HasSubstr("must be a whole number"));
}

// Issue 24: CLI11 read "--learning-rate ''" as unset, "--save ''" as no save, clamped
// 99999999999999999999 to 2^63-1 and read "010" as octal 8, all silently.
TEST(CliChecksTest, OptionValuesCLI11TakesSilentlyAreRefused) {
  auto check = [](std::vector<std::string> args) -> std::string {
    CLI::App app;
    int64_t steps = 1;
    uint64_t seed = 0;
    std::optional<double> learning_rate;
    std::string save;
    bool json = false;
    app.add_option("--steps", steps);
    app.add_option("--seed", seed);
    app.add_option("--learning-rate", learning_rate);
    app.add_option("--save", save);
    app.add_flag("--json", json);
    std::reverse(args.begin(), args.end());
    try {
      app.parse(args);
      check_option_values(app);
    } catch (const CLI::ParseError& e) {
      return e.what();
    }
    return "ok";
  };
  EXPECT_EQ(check({"--steps", "9223372036854775807", "--seed", "18446744073709551615", "--json"}),
            "ok");
  EXPECT_EQ(check({"--steps", "-3", "--learning-rate", "1e-3", "--save", "out"}), "ok");
  EXPECT_EQ(check({"--learning-rate", ""}),
            "--learning-rate: an empty value is not a value: give one, or leave the option out");
  EXPECT_THAT(check({"--save", ""}), HasSubstr("--save: an empty value is not a value"));
  EXPECT_EQ(check({"--steps", "99999999999999999999"}),
            "--steps: '99999999999999999999' is not a whole number from -9223372036854775808 to "
            "9223372036854775807 (decimal, no leading zeros)");
  EXPECT_THAT(check({"--steps", "9223372036854775808"}), HasSubstr("is not a whole number"));
  EXPECT_THAT(check({"--steps", "010"}), HasSubstr("'010' is not a whole number"));
  EXPECT_THAT(check({"--steps", "0x10"}), HasSubstr("'0x10' is not a whole number"));
  EXPECT_THAT(check({"--seed", "18446744073709551616"}),
              HasSubstr("from 0 to 18446744073709551615"));
  EXPECT_THAT(check({"--seed", "-1"}), HasSubstr("'-1' is not a whole number from 0"));
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
