// rule_suggest.h — `meshlayout rules suggest`: a rules file derived from the model, which
// splits every tensor of more than min_bytes and says why for each rule.
//
// Strategies (the mesh axes are named by the options):
//   megatron        tensor parallelism over the model axis: each tensor splits the dimension
//                   Megatron splits — the query and key/value heads and the feed-forward width
//                   (column-parallel q/k/v, gate and up; row-parallel attention output and
//                   down), the vocabulary of the embeddings and the lm_head, the experts of a
//                   mixture — when the axis divides it; where it does not (2 key/value heads
//                   on a 4-way axis, 4 heads on a 3-way one) another dimension that divides
//                   (the hidden size: row-parallel), else the most even uneven split; never
//                   head_dim while another dimension is left. Other mesh axes hold replicas.
//   fsdp            every tensor split over the data axes (default: every mesh axis) on its
//                   largest dimension they divide (else the most even uneven split).
//   megatron+fsdp   both: the megatron dimension over the model axis and the largest other
//                   dimension over the data axes (default: every axis but the model axis).
// What each dimension is comes from model_tensors.h (config fields, Hugging Face
// dimensions), so a family is covered as soon as its weight mappings are. Every rule carries
// its reason (the rules file's third element); the suggestion checks itself with check_rules.
//
// Example:
//   Suggestion s = suggest_rules(load_model_tensors("llama-dir"),
//                                DeviceMesh::from_string("batch=2,model=4"),
//                                {.strategy = SuggestStrategy::kMegatronFsdp});
//   std::cout << write_rules(s.rules, RulesDialect::kMeshlayout, {});
//   // ["^transformer_layer_\\d+/self_attention/query/kernel$", ["batch", "model", null],
//   //  "megatron: the query heads (32) over 'model' (4): column-parallel …; fsdp: …"]
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/rules/model_tensors.h"
#include "meshlayout/rules/rule_dialects.h"

namespace meshlayout {

enum class SuggestStrategy { kMegatron, kFsdp, kMegatronFsdp };

/// "megatron", "fsdp" or "megatron+fsdp"; ValueError naming `name` and the three otherwise.
SuggestStrategy parse_suggest_strategy(std::string_view name);
std::string_view suggest_strategy_name(SuggestStrategy strategy);

struct SuggestOptions {
  SuggestStrategy strategy = SuggestStrategy::kMegatron;
  /// Tensors of more bytes than this get a rule; the others stay replicated.
  int64_t min_bytes = int64_t{1} << 20;
  /// The tensor-parallel axis (megatron, megatron+fsdp).
  std::string model_axis = "model";
  /// The axes FSDP splits over, major first; empty: fsdp, every mesh axis; megatron+fsdp,
  /// every axis but the model axis. Axes of size 1 are left out (a note says so).
  std::vector<std::string> data_axes;
};

struct Suggestion {
  /// The rules (search mode, anchored patterns, one per variable of every layer), on the
  /// mesh, each with its reason.
  RuleSet rules;
  /// What concerns the whole suggestion: the axes used and those holding replicas, the
  /// tensors left whole, and what the model's forward does with each uneven split
  /// (llama_split_notes).
  std::vector<std::string> notes;
};

/// The rules for `model` on `mesh`. ValueError naming the value for: a mesh that lacks the
/// model axis (megatron, megatron+fsdp) or a data axis given, no data axis left
/// (megatron+fsdp), a strategy left with no axis of size > 1, a negative min_bytes.
Suggestion suggest_rules(const ModelTensors& model, const DeviceMesh& mesh,
                         const SuggestOptions& options = {});

}  // namespace meshlayout
