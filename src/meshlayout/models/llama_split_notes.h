// llama_split_notes.h — what a Llama-style model (every family of LlamaConfig) will do with the
// splits its forward cannot honour exactly, said before anything is allocated: for each layer,
// query heads, key/value heads, head_dim, the feed-forward width and the vocabulary under
// `rules`. `meshlayout plan` prints them as warnings of kind "model_split".
//
//   * query heads split over axes of total size n with H % n != 0: uneven head blocks;
//   * key/value heads that do not split like the query heads (keras-hub #1613: 2 KV heads on a
//     4-way axis): each device keeps every KV head it needs — the projections' output and the
//     cache are replicated over the head axes (ops/attention.h's attention_kv_layout);
//   * head_dim split: gathered whole before the rotary embedding and the scores;
//   * the vocabulary or the feed-forward width over an axis that does not divide it: uneven
//     shards (lookups, projections and the vocab-parallel cross-entropy take them as they are).
//
// Example:
//   for (const std::string& note : llama_split_notes(config, rules)) std::cerr << note << "\n";
#pragma once

#include <string>
#include <vector>

#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/models/hf_llama_config.h"

namespace meshlayout {

/// One message per split the forward cannot honour exactly, naming the variable, the sizes and
/// the mesh axes, and saying what meshlayout does instead; identical notes of different layers
/// are said once, naming the first layer and how many share it. Empty when every split divides.
/// config.validate()'s ValueError for a bad config; the rules must have a mesh.
std::vector<std::string> llama_split_notes(const LlamaConfig& config, const LayoutMap& rules);

}  // namespace meshlayout
