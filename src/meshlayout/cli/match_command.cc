#include "meshlayout/cli/match_command.h"

#include <fmt/format.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <variant>

#include "meshlayout/cli/cli_checks.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"

namespace meshlayout::cli {

int run_match(const MatchOptions& options, std::istream& in, std::ostream& out, std::ostream& err) {
  RulesFile rules = load_rules_file(options.rules_path);
  std::optional<MatchMode> mode;
  if (options.mode) mode = parse_match_mode(*options.mode);
  const LayoutMap map = rules.to_layout_map(mode);

  std::vector<std::string> paths;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    paths.push_back(std::move(line));
  }
  check_read(in, "the paths on standard input");  // e.g. stdin is a directory: not "no paths"

  if (options.explain) {
    for (const std::string& path : paths) out << map.explain(path).to_string(map);
  } else {
    // Look every path up first so that --stats times the lookups alone.
    using Result = std::variant<std::optional<size_t>, std::string>;
    std::vector<Result> results(paths.size());
    auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < paths.size(); ++i) {
      try {
        results[i] = map.match_index(paths[i]);
      } catch (const ValueError& e) {
        results[i] = std::string(e.what());
      }
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (size_t i = 0; i < paths.size(); ++i) {
      nlohmann::ordered_json line;
      line["path"] = paths[i];
      if (const auto* error = std::get_if<std::string>(&results[i])) {
        line["error"] = *error;
      } else if (const auto& index = std::get<std::optional<size_t>>(results[i])) {
        line["rule"] = *index;
        line["pattern"] = map.rule(*index).pattern;
        line["layout"] = nlohmann::json::parse(layout_to_json(map.rule(*index).layout));
      } else {
        line["rule"] = nullptr;
        line["pattern"] = nullptr;
        line["layout"] = nullptr;
      }
      out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
    if (options.stats) {
      double rate = seconds > 0 ? static_cast<double>(paths.size()) / seconds : 0.0;
      err << fmt::format("lookups={} seconds={:.6f} lookups_per_s={:.0f}\n", paths.size(), seconds,
                         rate);
    }
  }
  if (options.warn_unused) {
    for (size_t i : map.unused_rules(paths)) {
      err << fmt::format("warning: rule {} ({}) matches none of the {} paths\n", i,
                         nlohmann::json(map.rule(i).pattern).dump(), paths.size());
    }
  }
  return 0;
}

void add_match_command(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<MatchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "match",
      "Read variable paths from stdin (one per line) and print, per line, the JSON object "
      "{\"path\", \"rule\", \"pattern\", \"layout\"} of the rule that decides it, or "
      "{\"path\", \"error\"} for a path several rules match.");
  cmd->add_option("--rules", options->rules_path, "JSON rules file")->required();
  cmd->add_option("--mode", options->mode,
                  "search (default; Keras 3.0-3.13), fullmatch (Keras >= 3.14) or first "
                  "(Keras 2); overrides the file's \"mode\"");
  cmd->add_flag("--stats", options->stats,
                "print lookups=<n> seconds=<s> lookups_per_s=<r> on stderr (lookups only)");
  cmd->add_flag("--explain", options->explain,
                "print every matching rule and the verdict per path instead of JSON");
  cmd->add_flag("--warn-unused", options->warn_unused,
                "warn on stderr about rules that match none of the paths");
  cmd->callback([options, exit_code] {
    // Planning only: meshes of any size are described, no device is used.
    set_device_count(kMaxMeshDevices);
    *exit_code = run_match(*options, std::cin, std::cout, std::cerr);
  });
}

}  // namespace meshlayout::cli
