// name_groups.h — many names said in a few lines, as the plan page (plan_html.h) lists the
// tensors that share a layout and the warnings that repeat per layer: names equal but for their
// numbers are one group, each number that differs shown as the set of its values.
//
// Example:
//   group_names({"layer_0/q", "layer_1/q", "layer_2/q", "emb"});
//       // {{"layer_{0–2}/q", 3}, {"emb", 1}}
//   format_ranges({0, 1, 2, 5});   // "0–2,5"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {

/// Tensor names grouped by their non-digit text, each digit run that differs shown as the set
/// of its values: {"a_0/k", "a_1/k", "a_2/k", "b"} -> {"a_{0–2}/k" (3), "b" (1)}.
struct NameGroup {
  std::string text;
  size_t count = 0;
};
std::vector<NameGroup> group_names(const std::vector<std::string_view>& names);

/// Integers as ranges: {0, 1, 2, 5, 7, 8} -> "0–2,5,7–8"; after `max_ranges` ranges, "…".
std::string format_ranges(std::vector<int64_t> values, size_t max_ranges = 6);

}  // namespace meshlayout
