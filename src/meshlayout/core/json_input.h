// json_input.h — parsing JSON read from files (rules files, *.index.json) defensively:
// nesting is limited (so neither the parser's users nor anything that walks the result can
// exhaust the stack), a raw NUL byte is refused, duplicate keys in any object are refused
// instead of the last one silently winning, and messages say where (line, column, byte) and
// stay short. json_excerpt() shows a value in a message without recursion.
//
// Example:
//   nlohmann::json j = parse_json_checked(text);   // ValueError: "… nested deeper than 64 …"
//   std::string s = json_excerpt(j["rules"][0]);   // at most 60 characters
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace meshlayout {

/// Deepest nesting of lists and objects parse_json_checked() accepts by default.
inline constexpr size_t kMaxJsonDepth = 64;

/// Parses `text`. ValueError (message without a file name; callers add theirs) for invalid
/// JSON, nesting deeper than `max_depth` (naming the limit and the line, column and byte where
/// it is passed), a raw NUL byte, or a key that appears twice in one object (naming the key
/// and the object's path, e.g. `"mesh"`).
nlohmann::json parse_json_checked(std::string_view text, size_t max_depth = kMaxJsonDepth);

/// The compact JSON text of `value`, cut to about `max_chars` with "..." — written with an
/// explicit stack (no recursion), so any depth is safe; invalid UTF-8 is replaced.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);

}  // namespace meshlayout
