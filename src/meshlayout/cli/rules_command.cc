#include "meshlayout/cli/rules_command.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/hf_llama_config.h"
#include "meshlayout/rules/rule_dialects.h"

namespace meshlayout::cli {

int run_rules_convert(const RulesConvertOptions& options, std::ostream& out, std::ostream& err) {
  const RulesDialect from = parse_rules_dialect(options.from);
  const RulesDialect to = parse_rules_dialect(options.to);
  ConvertOptions convert;
  convert.tp_axis = options.tp_axis;
  if (options.mesh) convert.mesh = DeviceMesh::from_string(*options.mesh);
  if (options.names) {
    if (*options.names == "hf") {
      convert.names = HfNames::kHf;
    } else if (*options.names == "keras-hub") {
      convert.names = HfNames::kKerasHub;
    } else {
      throw ValueError(fmt::format("--names {}: expected hf or keras-hub", quote(*options.names)));
    }
  }
  if (options.model) {
    use_model_config(convert, LlamaConfig::from_file(*options.model + "/config.json"));
  }
  if (options.family) {
    convert.family = *options.family;
    convert.name_map.reset();  // --family names the map to use
  }
  const std::string text = read_regular_file(options.file, kMaxJsonFileBytes, "rules file");
  std::vector<std::string> warnings;
  const std::string converted =
      convert_rules(text, from, to, convert, quote(options.file), &warnings);
  for (const std::string& w : warnings) err << "warning: " << w << '\n';
  out << converted;
  return 0;
}

void add_rules_command(CLI::App& app, int* exit_code) {
  CLI::App* rules = app.add_subcommand(
      "rules", "Layout rules in other stacks' dialects: `rules convert` (see its --help).");
  rules->require_subcommand(1);
  auto options = std::make_shared<RulesConvertOptions>();
  CLI::App* cmd = rules->add_subcommand(
      "convert",
      "Print the rules of FILE, read in dialect --from, written in dialect --to, on stdout; "
      "warnings on stderr. Dialects: meshlayout (meshlayout's rules file), keras-hub "
      "(get_layout_map as JSON {regex: layout}, or as Python prints the dict), hf-tp-plan (a "
      "Hugging Face base_model_tp_plan "
      "{module: style}, or a config.json holding one), maxtext (YAML logical_axis_rules and "
      "logical_axes, Flax precedence). What the target dialect cannot express is an error "
      "naming the rule.");
  cmd->add_option("FILE", options->file, "the rules file to convert")->required();
  cmd->add_option("--from", options->from,
                  "dialect of FILE: meshlayout, keras-hub, hf-tp-plan "
                  "or maxtext")
      ->required();
  cmd->add_option("--to", options->to,
                  "dialect to print: meshlayout, keras-hub, hf-tp-plan or "
                  "maxtext")
      ->required();
  cmd->add_option("--mesh", options->mesh,
                  "mesh, e.g. data=2,model=4: every layout's axes must be its axes; meshlayout "
                  "and maxtext output name it; with --model, an HF plan's split of heads "
                  "the tensor-parallel axis does not divide is warned (HF and keras-hub cut "
                  "other rows)");
  cmd->add_option("--model", options->model,
                  "a Hugging Face model directory: its config.json's model_type picks the name "
                  "map, and an HF plan written from keras-hub paths checks all its layers");
  cmd->add_option("--names", options->names,
                  "hf or keras-hub: the names Hugging Face plan rules use (default: keras-hub "
                  "when --from or --to is keras-hub, else hf)");
  cmd->add_option("--family", options->family,
                  "the family whose Hugging Face <-> keras-hub name map to use (default: "
                  "--model's model_type, else llama)");
  cmd->add_option("--tp-axis", options->tp_axis,
                  "the mesh axis Hugging Face plans split over (default: model)");
  cmd->callback([options, exit_code] {
    set_device_count(kMaxMeshDevices);  // meshes are described, no device is used
    *exit_code = run_rules_convert(*options, std::cout, std::cerr);
  });
}

}  // namespace meshlayout::cli
