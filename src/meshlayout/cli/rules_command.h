// rules_command.h — `meshlayout rules convert`: layout rules from one dialect to another
// (rules/rule_dialects.h), printed on stdout; warnings on stderr.
//
//   meshlayout rules convert plan.json --from hf-tp-plan --to keras-hub
//   meshlayout rules convert rules.json --from meshlayout --to maxtext --mesh data=2,model=4
//   meshlayout rules convert plan.json --from hf-tp-plan --to meshlayout --model llama-dir
//
// Dialects: meshlayout, keras-hub, hf-tp-plan, maxtext. --names says whether Hugging Face
// plans are keyed to Hugging Face tensor names or keras-hub paths (default: keras-hub when
// either side is keras-hub); --model DIR takes the name map (the model's own weights, by its
// model_type) and the layer count from its config.json.
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <optional>
#include <string>

namespace meshlayout::cli {

struct RulesConvertOptions {
  std::string file;
  std::string from;
  std::string to;
  std::optional<std::string> mesh;   // e.g. data=2,model=4
  std::optional<std::string> model;  // a Hugging Face model directory (config.json)
  std::optional<std::string> names;  // hf or keras-hub
  std::optional<std::string> family;
  std::string tp_axis = "model";
};

/// Runs `rules convert`; returns the process exit code. Errors are exceptions naming the file.
int run_rules_convert(const RulesConvertOptions& options, std::ostream& out, std::ostream& err);

/// Registers `rules` and its subcommand `convert` on `app`.
void add_rules_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
