// rule_dialects.h — layout rules in four dialects, read into one RuleSet (LayoutMap rules)
// and written back out: `meshlayout rules convert FILE --from D --to D`.
//
// Dialects and their files:
//   meshlayout   meshlayout's own rules file (layout_map/rules_file.h).
//   keras-hub    the output of keras-hub's get_layout_map as JSON, one key per rule in order:
//                  {"token_embedding/embeddings": ["model", "batch"],
//                   "transformer_layer.*feedforward_output_dense.kernel": ["model", "batch"]}
//                (null: not split; a list: several mesh axes on one dimension, major first).
//                Read also as Python prints the dict: {'regex': ('model', None), r'…': …}
//                (quotes, raw strings, tuples, None, # comments); always written as JSON.
//   hf-tp-plan   a Hugging Face tensor-parallel plan: a JSON object {module: style}, e.g.
//                LlamaConfig.base_model_tp_plan {"layers.*.self_attn.q_proj": "colwise", …},
//                or a config.json holding one under "base_model_tp_plan". Keys are relative to
//                the base model ("layers.*.mlp.up_proj", rules on "model.layers.…") unless they
//                start with "model." or are "lm_head" (ForCausalLM's _tp_plan); `*` is a layer
//                index (digits), as in Hugging Face's _get_parameter_tp_plan. Plans are
//                written with keys relative to the base model (and lm_head), in rule order.
//   maxtext      YAML with Flax/MaxText logical axis rules:
//                  logical_axis_rules: [['embed', 'fsdp'], ['heads', ['tensor', 'model']],
//                                       ['norm', null]]
//                  logical_axes:
//                    transformer_layer_*/self_attention/query/kernel: [embed, heads, null]
//                Flax's semantics (flax.linen.partitioning.logical_to_mesh_axes): for each
//                tensor, rules are tried in order of precedence; a rule gives its mesh axes to
//                the tensor's dimension of that logical name when the dimension has none yet
//                and none of the axes is used by the tensor already; a dimension no rule gives
//                an axis is not split (a warning when a rule was skipped for it). A logical name
//                twice in one tensor is refused, as Flax does. Keys of logical_axes are paths,
//                `*` a run of digits. Other keys (a MaxText config's settings) are named in a
//                warning and not read.
//
// What each Hugging Face style means for the parameters of its module (transformers'
// integrations/tensor_parallel.py, on nn.Linear weights (out, in) and biases (out,)):
//   colwise, colwise_rep, local_colwise    weight Shard(-2) (dim 0: output features), bias
//                                          Shard(-1) (dim 0)
//   rowwise, rowwise_rep, local_rowwise    weight Shard(-1) (dim 1: input features), bias
//                                          replicated
//   replicate, sequence_parallel,          parameters replicated
//   replicated_with_grad_allreduce
//   gather, local                          parameters replicated (local: HF divides them by
//                                          the mesh size; a warning says so)
// The `_rep`, `local_` and sequence-parallel variants differ from the plain ones only in how
// activations are gathered or reduced, which a layout map does not hold: reading them gives
// the same parameter layouts, carried with the style (hf_style) so that writing an HF plan
// from the same RuleSet gives the style back; writing any other dialect warns that the
// activation part is dropped. Splits are on one mesh axis (ConvertOptions::tp_axis). Other
// styles (packed_*, grouped_gemm, ep_router, moe_tp_experts, …) are refused by name.
// On keras-hub paths (ConvertOptions::names == kKerasHub) each HF tensor's layout becomes its
// keras-hub variable's through the family's HfNameMap: q_proj's weight (heads*head_dim,
// hidden) split on dim 0 is query/kernel (hidden, heads, head_dim) split on heads:
// [None, model, None]; o_proj rowwise is attention_output/kernel (heads, head_dim, hidden)
// [model, None, None]; gate/up colwise are (hidden, ff) kernels [None, model]; down rowwise
// [model, None]; Gemma's heads-first attention/query/kernel (heads, hidden, head_dim)
// [model, None, None]. Each device then holds the rows the HF plan gives it when tp_axis
// divides the heads (with model_mappings and a mesh, a warning says where it does not).
//
// What a dialect cannot express is an error naming the rule: several mesh axes on one
// dimension or two split dimensions in an HF plan, a split on another axis than tp_axis, a
// keras-hub head_dim split, a split of a mixture's stacked experts (expert parallelism: each
// expert's HF tensor is one slice of keras-hub's (experts, …) kernel, hf_name_map.h), layers
// or experts that disagree under one `layers.*` key. Where paths are
// needed (HF plan keys, MaxText paths: literal text, `*` for `\d+`), a regex rule becomes
// the paths of the family's variables it decides, with a warning listing them; one that
// decides none, or some layers of a variable only, is an error naming it. A mesh axis used
// twice in one layout, a malformed file, an unknown style, a logical name no rule maps:
// errors too.
//
// Example:
//   ConvertOptions o;
//   RuleSet rules = read_rules(text, RulesDialect::kHfTpPlan, o, "plan.json");
//   LayoutMap map = rules.to_layout_map();
//   std::string yaml = write_rules(rules, RulesDialect::kMaxText, o);
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/hf_llama_checkpoint.h"
#include "meshlayout/rules/hf_name_map.h"

namespace meshlayout {

enum class RulesDialect { kMeshlayout, kKerasHub, kHfTpPlan, kMaxText };

/// "meshlayout", "keras-hub", "hf-tp-plan", "maxtext"; ValueError naming `name` otherwise.
RulesDialect parse_rules_dialect(std::string_view name);
std::string_view rules_dialect_name(RulesDialect dialect);

/// Which names HF plans are converted to and from.
enum class HfNames {
  kHf,        // Hugging Face tensor names: model.layers.0.self_attn.q_proj.weight
  kKerasHub,  // keras-hub paths through the family's HfNameMap
};

struct ConvertOptions {
  /// The mesh axis a Hugging Face plan splits over.
  std::string tp_axis = "model";
  /// Names of HF plan rules; default: kKerasHub when either side of a conversion is
  /// keras-hub, else kHf (convert_rules decides; read_rules/write_rules take kHf).
  std::optional<HfNames> names;
  /// The family whose HfNameMap maps names (a config.json model_type).
  std::string family = "llama";
  /// A name map to use instead of the family's (e.g. one model's exact map, from its config).
  std::shared_ptr<const HfNameMap> name_map;
  /// One model's weights (hf_llama_weight_mappings of its config), for its sizes: with a mesh,
  /// a split of heads*head_dim (or another reshaped dimension) whose major part the
  /// tensor-parallel axis does not divide is cut at other rows in HF's flat layout than in
  /// keras-hub's heads layout, and converting between the two warns, naming both.
  std::vector<HfWeightMapping> model_mappings;
  /// Layer indices checked when an HF plan is written from rules on keras-hub paths (every
  /// layer of the model, from its num_hidden_layers); empty: 0, 1, 2, 3, 7 and 31.
  std::vector<int64_t> layer_indices;
  /// When set, every layout's axes must be this mesh's, and written files name it (meshlayout).
  std::optional<DeviceMesh> mesh;
};

/// One rule: a LayoutMap key (a Python regex) and its layout, with where it came from.
struct ConvertedRule {
  std::string pattern;
  std::vector<DimSharding> layout;
  /// For messages: "'layers.*.self_attn.q_proj' (colwise)", "rules[3]", ….
  std::string origin;
  /// The Hugging Face style it was read from, when it was.
  std::optional<std::string> hf_style;
  /// The MaxText logical axis names it was read from, when it was (one per dimension).
  std::optional<std::vector<std::optional<std::string>>> logical_axes;
  /// Why the rule is what it is (a meshlayout rules file's third element, e.g. what
  /// rules suggest says); written back to meshlayout files only.
  std::string reason;
};

struct RuleSet {
  std::vector<ConvertedRule> rules;
  MatchMode mode = MatchMode::kSearch;
  std::optional<DeviceMesh> mesh;
  /// MaxText's logical_axis_rules as read (name, mesh axes), when read from MaxText.
  std::optional<std::vector<std::pair<std::string, std::vector<std::string>>>> logical_axis_rules;
  /// MaxText's mesh_axes, when read from MaxText (written back when no mesh is known).
  std::optional<std::vector<std::string>> mesh_axes;
  /// What reading or writing noticed but did not refuse, each naming its rule.
  std::vector<std::string> warnings;

  /// The LayoutMap of these rules (mesh: the RuleSet's, if any). ValueError naming the rule
  /// the map refuses.
  LayoutMap to_layout_map() const;
  /// The rules of `map`, in its order (no styles or logical names).
  static RuleSet from_layout_map(const LayoutMap& map);
};

/// Reads `text` in `dialect`; `source` names it in messages. ValueError for a malformed file
/// or a rule the dialect's semantics refuse (naming the rule and what was expected).
RuleSet read_rules(std::string_view text, RulesDialect dialect, const ConvertOptions& options,
                   std::string_view source);

/// Writes `rules` in `dialect` (text ending in a newline). Warnings are appended to
/// `warnings` when given. ValueError naming the rule a dialect cannot express.
std::string write_rules(const RuleSet& rules, RulesDialect dialect, const ConvertOptions& options,
                        std::vector<std::string>* warnings = nullptr);

/// read_rules then write_rules, options.names defaulted as ConvertOptions says; the
/// warnings of both steps are appended to `warnings`.
std::string convert_rules(std::string_view text, RulesDialect from, RulesDialect to,
                          ConvertOptions options, std::string_view source,
                          std::vector<std::string>* warnings = nullptr);

/// Sets `options` for one model: its family, every layer index, its weights (model_mappings)
/// and its exact name map (no rule for a bias or head norm it lacks).
void use_model_config(ConvertOptions& options, const LlamaConfig& config);

/// A LayoutMap pattern with no regex features beyond literal text, `\d+` / `[0-9]+` and
/// `^`/`$` anchors, written as a glob with `*` for `\d+`; std::nullopt otherwise.
std::optional<std::string> regex_to_glob(std::string_view pattern);
/// The anchored regex of a glob whose `*` is a run of digits: "^a\.b\d+c$".
std::string glob_to_regex(std::string_view glob);

}  // namespace meshlayout
