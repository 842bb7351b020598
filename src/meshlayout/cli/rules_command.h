// rules_command.h — `meshlayout rules convert`: layout rules from one dialect to another
// (rules/rule_dialects.h), printed on stdout; warnings on stderr. `rules suggest` prints rules
// derived from a model (rules/rule_suggest.h), `rules check` lists every problem of a rule set
// on a model and `rules diff` the tensors two rule sets lay out differently
// (rules/rule_check.h); all three from the model's config alone.
//
//   meshlayout rules convert plan.json --from hf-tp-plan --to keras-hub
//   meshlayout rules convert rules.json --from meshlayout --to maxtext --mesh data=2,model=4
//   meshlayout rules convert plan.json --from hf-tp-plan --to meshlayout --model llama-dir
//   meshlayout rules suggest --model llama-dir --mesh batch=2,model=4 --strategy megatron+fsdp
//   meshlayout rules check --model llama-dir --rules rules.json --min-bytes 1MiB   # exit 1:
//   problems meshlayout rules diff plan.json keras.json --model llama-dir --from-a hf-tp-plan
//   --from-b keras-hub
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
#include <vector>

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

struct RulesSuggestArgs {
  std::string model;  // a Hugging Face model directory, or weights only
  std::string mesh;
  std::string strategy = "megatron";
  std::string min_bytes = "1MiB";
  std::optional<std::string> family;
  std::string model_axis = "model";
  std::vector<std::string> data_axes;
};

/// Runs `rules suggest`: the rules file on `out`, the notes on `err`; returns 0.
int run_rules_suggest(const RulesSuggestArgs& args, std::ostream& out, std::ostream& err);

struct RulesCheckArgs {
  std::string model;
  std::string rules;
  std::string from = "meshlayout";
  std::string min_bytes = "1MiB";
  std::optional<std::string> mesh;
  std::optional<std::string> family;
  std::string tp_axis = "model";
};

/// Runs `rules check`: one line per problem on `out` and a summary; returns 1 when there is a
/// problem, else 0.
int run_rules_check(const RulesCheckArgs& args, std::ostream& out, std::ostream& err);

struct RulesDiffArgs {
  std::string a, b;
  std::string model;
  std::string from_a = "meshlayout", from_b = "meshlayout";
  std::optional<std::string> mesh;
  std::optional<std::string> family;
  std::string tp_axis = "model";
};

/// Runs `rules diff`: one line per tensor whose layout differs on `out`, a count on `err`;
/// returns 1 when some differ, else 0.
int run_rules_diff(const RulesDiffArgs& args, std::ostream& out, std::ostream& err);

/// Registers `rules` and its subcommands `convert`, `suggest`, `check` and `diff` on `app`.
void add_rules_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
