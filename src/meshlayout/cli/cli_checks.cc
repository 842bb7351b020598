#include "meshlayout/cli/cli_checks.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

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
