#include "meshlayout/cli/cli_checks.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout::cli {

const CLI::Validator kUint64Text(
    [](std::string& text) -> std::string {
      uint64_t value = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, value);
      if (text.empty() || ec != std::errc() || ptr != end) {
        return fmt::format("must be a whole number from 0 to {}, got {}", UINT64_MAX, quote(text));
      }
      return "";
    },
    "UINT64");

std::optional<std::string> unknown_subcommand(const CLI::App& app, int argc,
                                              const char* const* argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  const std::string_view word = argv[1];
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(std::string(word))) return std::nullopt;
    names.push_back(sub->get_name());
  }
  return fmt::format("unknown subcommand {}; expected one of: {} (see --help)", quote(word),
                     join(names, ", "));
}

void check_option_values(const CLI::App& command) {
  for (const CLI::Option* opt : command.get_options()) {
    if (opt->count() == 0 || opt->get_type_size() == 0) continue;  // not given, or a flag
    const std::string type = opt->get_type_name();
    const bool is_unsigned = type.starts_with("UINT");
    const bool is_integer = is_unsigned || type.starts_with("INT");
    for (const std::string& value : opt->results()) {
      if (value.empty()) {
        throw CLI::ValidationError(
            opt->get_name(), "an empty value is not a value: give one, or leave the option out");
      }
      if (!is_integer) continue;
      const char* begin = value.data();
      const char* end = value.data() + value.size();
      if (*begin == '+') ++begin;
      const bool negative = *begin == '-';
      const char* digits = begin + (negative ? 1 : 0);
      const bool decimal = digits != end &&
                           std::all_of(digits, end, [](char c) { return c >= '0' && c <= '9'; }) &&
                           !(end - digits > 1 && *digits == '0');
      bool fits = false;
      if (decimal && is_unsigned && !negative) {
        uint64_t v = 0;
        fits = std::from_chars(digits, end, v).ec == std::errc();
      } else if (decimal && !is_unsigned) {
        int64_t v = 0;
        fits = std::from_chars(begin, end, v).ec == std::errc();
      }
      if (!fits) {
        throw CLI::ValidationError(
            opt->get_name(),
            fmt::format("{} is not a whole number from {} to {} (decimal, no leading zeros)",
                        quote(value), is_unsigned ? "0" : std::to_string(INT64_MIN),
                        is_unsigned ? std::to_string(UINT64_MAX) : std::to_string(INT64_MAX)));
      }
    }
  }
}

void check_read(std::istream& in, std::string_view what) {
  // With sync_with_stdio (the default), a failed read() on stdin shows only in the C stream.
  const int err = errno;
  if (&in == &std::cin && std::ferror(stdin)) {
    struct stat st {};
    if (::fstat(STDIN_FILENO, &st) == 0 && S_ISDIR(st.st_mode)) {
      throw ValueError(fmt::format("cannot read {}: standard input is a directory", what));
    }
    throw ValueError(fmt::format("cannot read {}: {}", what, std::strerror(err)));
  }
  if (in.bad()) throw ValueError(fmt::format("cannot read {}: the stream failed", what));
}

void agree_or_rethrow(Runtime& runtime, const std::exception_ptr& failure) {
  if (runtime.num_processes() == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  agree_on_failure(runtime.comm(), failure);
}

}  // namespace meshlayout::cli
