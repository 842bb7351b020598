#include "meshlayout/cli/rules_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <iostream>
#include <memory>

#include "meshlayout/core/byte_size.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/models/hf_llama_config.h"
#include "meshlayout/rules/rule_check.h"
#include "meshlayout/rules/rule_dialects.h"
#include "meshlayout/rules/rule_suggest.h"

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

namespace {

int64_t min_bytes_of(const std::string& text) {
  const uint64_t n = parse_byte_count(text, "--min-bytes");
  if (n > static_cast<uint64_t>(INT64_MAX)) {
    throw ValueError(fmt::format("--min-bytes {}: too large", quote(text)));
  }
  return static_cast<int64_t>(n);
}

// The rules of `path` in `dialect` on the model's tensors: Hugging Face plans on keras-hub
// paths through the model's own name map (HF names for a weights-only model).
RuleSet read_model_rules(const std::string& path, const std::string& dialect,
                         const ModelTensors& model, const std::optional<std::string>& mesh,
                         const std::string& tp_axis, std::ostream& err) {
  ConvertOptions o;
  o.tp_axis = tp_axis;
  if (mesh) o.mesh = DeviceMesh::from_string(*mesh);
  if (model.config) {
    use_model_config(o, *model.config);
    o.names = HfNames::kKerasHub;
  } else {
    o.names = HfNames::kHf;
  }
  const std::string text = read_regular_file(path, kMaxJsonFileBytes, "rules file");
  RuleSet rules = read_rules(text, parse_rules_dialect(dialect), o, quote(path));
  for (const std::string& w : rules.warnings) err << "warning: " << w << '\n';
  return rules;
}

}  // namespace

int run_rules_suggest(const RulesSuggestArgs& args, std::ostream& out, std::ostream& err) {
  const SuggestOptions options{.strategy = parse_suggest_strategy(args.strategy),
                               .min_bytes = min_bytes_of(args.min_bytes),
                               .model_axis = args.model_axis,
                               .data_axes = args.data_axes};
  const DeviceMesh mesh = DeviceMesh::from_string(args.mesh);
  const ModelTensors model = load_model_tensors(args.model, args.family);
  const Suggestion s = suggest_rules(model, mesh, options);
  out << write_rules(s.rules, RulesDialect::kMeshlayout, {});
  err << fmt::format(
      "rules suggest: {} rules for {} ({} tensors), {} on {}, splitting every "
      "tensor of more than {} bytes\n",
      s.rules.rules.size(), model.source, model.tensors.size(), args.strategy, mesh.to_string(),
      options.min_bytes);
  for (const std::string& n : s.notes) err << "note: " << n << '\n';
  return 0;
}

int run_rules_check(const RulesCheckArgs& args, std::ostream& out, std::ostream& err) {
  const int64_t min_bytes = min_bytes_of(args.min_bytes);
  const ModelTensors model = load_model_tensors(args.model, args.family);
  const RuleSet rules =
      read_model_rules(args.rules, args.from, model, args.mesh, args.tp_axis, err);
  const std::vector<std::string> problems =
      check_rules(rules, model.tensors, {.min_bytes = min_bytes});
  for (const std::string& p : problems) out << "problem: " << p << '\n';
  if (problems.empty()) {
    out << fmt::format(
        "ok: {} rules on {} ({} tensors): every tensor of more than {} bytes is "
        "split, every rule matches a tensor, no tensor matches two rules\n",
        rules.rules.size(), model.source, model.tensors.size(), min_bytes);
    return 0;
  }
  out << fmt::format("rules check: {} problem{} with {} on {}\n", problems.size(),
                     problems.size() == 1 ? "" : "s", quote(args.rules), model.source);
  return 1;
}

int run_rules_diff(const RulesDiffArgs& args, std::ostream& out, std::ostream& err) {
  const ModelTensors model = load_model_tensors(args.model, args.family);
  const RuleSet a = read_model_rules(args.a, args.from_a, model, args.mesh, args.tp_axis, err);
  const RuleSet b = read_model_rules(args.b, args.from_b, model, args.mesh, args.tp_axis, err);
  const std::vector<LayoutDifference> diffs = diff_rules(a, b, model.tensors);
  for (const LayoutDifference& d : diffs) {
    out << fmt::format("{} ({}): A {}  B {}\n", d.path,
                       d.shape.size() == 1 ? fmt::format("{},", d.shape[0])
                                           : fmt::format("{}", fmt::join(d.shape, ", ")),
                       d.a, d.b);
  }
  err << fmt::format("rules diff: {} of {} tensors of {} differ between A {} and B {}\n",
                     diffs.size(), model.tensors.size(), model.source, quote(args.a),
                     quote(args.b));
  return diffs.empty() ? 0 : 1;
}

namespace {

const char kModelHelp[] =
    "a Hugging Face model directory (config.json: every tensor from the config alone, no "
    "weight read), or a weights-only model (a .safetensors file, an index, or a directory "
    "without config.json: its tensors by file name)";
const char kFamilyHelp[] =
    "read config.json as this family's (llama, mistral, qwen2, qwen3, gemma, gemma2, "
    "gemma3_text, mixtral, qwen3_moe, qwen2_moe) instead of its model_type";

void add_rules_analysis_commands(CLI::App& rules, int* exit_code) {
  auto suggest = std::make_shared<RulesSuggestArgs>();
  CLI::App* cmd = rules.add_subcommand(
      "suggest",
      "Print a meshlayout rules file for the model on --mesh that splits every tensor of more "
      "than --min-bytes, each rule with its reason (the rule's third element); notes on "
      "stderr. megatron: tensor parallelism over --model-axis (heads, feed-forward width, "
      "vocabulary, experts; where the axis does not divide them another dimension, else the "
      "most even uneven split, and the reason says so); fsdp: the largest dimension the data "
      "axes divide; megatron+fsdp: both. The rules pass `rules check`.");
  cmd->add_option("--model", suggest->model, kModelHelp)->required();
  cmd->add_option("--mesh", suggest->mesh, "the mesh, e.g. batch=2,model=4 (1 to 4 axes)")
      ->required();
  cmd->add_option("--strategy", suggest->strategy, "megatron (default), fsdp or megatron+fsdp");
  cmd->add_option("--min-bytes", suggest->min_bytes,
                  "tensors of more bytes (as the model holds them, F32) get a rule; e.g. 65536, "
                  "64KiB (default 1MiB)");
  cmd->add_option("--family", suggest->family, kFamilyHelp);
  cmd->add_option("--model-axis", suggest->model_axis,
                  "the tensor-parallel mesh axis (default: model)");
  cmd->add_option("--data-axis", suggest->data_axes,
                  "a mesh axis FSDP splits over, major first (repeat for several; default: fsdp, "
                  "every axis; megatron+fsdp, every axis but the model axis)");
  cmd->callback([suggest, exit_code] {
    set_device_count(kMaxMeshDevices);
    *exit_code = run_rules_suggest(*suggest, std::cout, std::cerr);
  });

  auto check = std::make_shared<RulesCheckArgs>();
  cmd = rules.add_subcommand(
      "check",
      "Check a rule set on a model before anything is allocated, listing every problem: a "
      "tensor of more than --min-bytes left replicated, a rule that matches no tensor (or, in "
      "mode first, decides none), a tensor several rules match, a layout of the wrong rank or "
      "on an axis the mesh lacks. Exit status 1 when there is a problem.");
  cmd->add_option("--model", check->model, kModelHelp)->required();
  cmd->add_option("--rules", check->rules, "the rules file")->required();
  cmd->add_option("--from", check->from,
                  "its dialect: meshlayout (default), keras-hub, hf-tp-plan or maxtext");
  cmd->add_option("--min-bytes", check->min_bytes,
                  "tensors of more bytes must be split (default 1MiB)");
  cmd->add_option("--mesh", check->mesh, "the mesh (default: the rules file's)");
  cmd->add_option("--family", check->family, kFamilyHelp);
  cmd->add_option("--tp-axis", check->tp_axis, "the axis Hugging Face plans split over");
  cmd->callback([check, exit_code] {
    set_device_count(kMaxMeshDevices);
    *exit_code = run_rules_check(*check, std::cout, std::cerr);
  });

  auto diff = std::make_shared<RulesDiffArgs>();
  cmd = rules.add_subcommand(
      "diff",
      "List the tensors of the model whose layout differs between rule sets A and B (any "
      "dialects, e.g. an imported Hugging Face plan against keras-hub's map): one line per "
      "tensor with both layouts. Exit status 0 when they agree on every tensor, else 1.");
  cmd->add_option("A", diff->a, "the first rules file")->required();
  cmd->add_option("B", diff->b, "the second rules file")->required();
  cmd->add_option("--model", diff->model, kModelHelp)->required();
  cmd->add_option("--from-a", diff->from_a, "A's dialect (default meshlayout)");
  cmd->add_option("--from-b", diff->from_b, "B's dialect (default meshlayout)");
  cmd->add_option("--mesh", diff->mesh, "the mesh both rule sets' axes must be on");
  cmd->add_option("--family", diff->family, kFamilyHelp);
  cmd->add_option("--tp-axis", diff->tp_axis, "the axis Hugging Face plans split over");
  cmd->callback([diff, exit_code] {
    set_device_count(kMaxMeshDevices);
    *exit_code = run_rules_diff(*diff, std::cout, std::cerr);
  });
}

}  // namespace

void add_rules_command(CLI::App& app, int* exit_code) {
  CLI::App* rules = app.add_subcommand(
      "rules",
      "Layout rules: `rules convert` between dialects, `rules suggest` from a model, `rules "
      "check` on a model, `rules diff` of two rule sets (see each one's --help).");
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
  add_rules_analysis_commands(*rules, exit_code);
}

}  // namespace meshlayout::cli
