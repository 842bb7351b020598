// text_format.h — small text helpers the plans (checkpoint_plan, plan_render) and the
// commands that print them share for their aligned tables, summaries and JSON output
// (format_bytes itself is core/byte_size.h's).
//
// JSON output is one object with one list item per line (greppable, and still one object for
// a JSON parser): nlohmann_json writes each item, so escaping is the library's.
//
// Example:
//   format_bytes(3 << 20)       // "3.0 MiB"
//   plural(1, "tensor")         // "1 tensor"
//   put(out, "{} of {}\n", a, b);  // fmt::format_to appending to a std::string
//   append_json_list(out, "tensors", n, [&](size_t i) { return Json{{"name", names[i]}}; });
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshlayout/core/byte_size.h"

namespace meshlayout {

/// Token ids as `5,17,42` (the form --prompt takes).
std::string join_ids(const std::vector<int32_t>& ids);

/// `1 tensor`, `2 tensors`.
std::string plural(size_t n, std::string_view word);

/// Display width of UTF-8 text (code points), for aligning columns.
size_t text_width(std::string_view text);

/// Appends formatted text to `out` (one growing string, no stream writes per line).
template <typename... Args>
void put(std::string& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

using Json = nlohmann::ordered_json;

/// Appends `j` as compact JSON; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
void append_json(std::string& out, const Json& j);

/// Appends `text` as a JSON string. Printable ASCII without `"` or `\` (most tensor names)
/// is copied between quotes; anything else goes through append_json.
void append_json_string(std::string& out, std::string_view text);

/// The members of object `j` without its braces, `"a":1,"b":2`, for splicing into a larger
/// object.
std::string json_members(const Json& j);

/// Appends `,\n"key":[` and then one item per line, `\n {…},\n {…}]`, `make_item(i)` giving
/// item i of n. For the lists inside a top-level object.
template <typename MakeItem>
void append_json_list(std::string& out, std::string_view key, size_t n, MakeItem make_item) {
  put(out, ",\n\"{}\":[", key);
  for (size_t i = 0; i < n; ++i) {
    out += i ? ",\n " : "\n ";
    append_json(out, make_item(i));
  }
  out += ']';
}

}  // namespace meshlayout
